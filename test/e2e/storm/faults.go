//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Fault is something that goes wrong in the cluster while a variant runs:
// an event of the timeline, injected by the harness at At.
type Fault struct {
	At   time.Duration
	Name string
	// Inject does it. It may block (the later events of the timeline wait)
	// and may start goroutines that measure what follows.
	Inject func(ctx context.Context, fr *FaultRun) error
}

// FaultRun is what a fault acts on and observes.
type FaultRun struct {
	Harness      *Harness
	Workload     *Workload
	Observations *Observations
	// Start is the moment the load started; offsets count from it.
	Start     time.Time
	Namespace string
}

// Offset returns t as an offset from the start of the load.
func (fr *FaultRun) Offset(t time.Time) time.Duration { return t.Sub(fr.Start) }

// faultSettle is the part of a fault scenario's phase left out of its
// goodput: calls admitted before are still draining.
const faultSettle = 2 * time.Second

// planFor reports whether p gives every one of pods a share and the pods
// together every usable permit: the division for exactly those pods, once
// the handover is done.
func planFor(p Published, pods []string) bool {
	sum := 0
	for _, pod := range pods {
		n := p.PermitsOf(pod)
		if n < 1 {
			return false
		}
		sum += n
	}
	return len(pods) > 0 && sum == Usable()
}

// waitForPlan polls, from the moment it is called, until a plan published
// after since gives exactly the running pods (want of them) every usable
// permit and, when acked, every running pod acknowledged it and the quota's
// status counts them all. It returns the moment it saw that, or an error
// after timeout.
func waitForPlan(ctx context.Context, fr *FaultRun, since time.Time, want int, acked bool, timeout time.Duration) (published, done time.Time, err error) {
	err = waitFor(ctx, timeout, fmt.Sprintf("a plan for %d running pods", want), func() (bool, error) {
		running := fr.Workload.Running()
		if len(running) != want {
			return false, nil
		}
		pub := fr.Observations.Published()
		for i := len(pub) - 1; i >= 0 && pub[i].Seen.After(since); i-- {
			if !planFor(pub[i], running) {
				continue
			}
			if published.IsZero() || pub[i].Seen.Before(published) {
				published = pub[i].Seen
			}
		}
		if published.IsZero() {
			return false, nil
		}
		return !acked || rolledOut(fr.Observations, running), nil
	})
	return published, time.Now(), err
}

// leadership follows which manager process holds the leader election
// lease, from client-go's "successfully acquired lease" log line.
type leadership struct {
	mu     sync.Mutex
	leader string
	since  time.Time
	cond   chan struct{} // closed and replaced on every change
}

// msgAcquiredLease starts the line client-go's leader election logs (through
// klog, into the manager's JSON log) once a replica leads; its case has
// changed between client-go versions.
const msgAcquiredLease = "successfully acquired lease"

func newLeadership() *leadership { return &leadership{cond: make(chan struct{})} }

func (l *leadership) observe(name string) func(LogLine) {
	return func(line LogLine) {
		if !strings.HasPrefix(strings.ToLower(line.Msg), msgAcquiredLease) {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.leader, l.since = name, time.Now()
		close(l.cond)
		l.cond = make(chan struct{})
	}
}

// current returns the leader's name and since when it leads.
func (l *leadership) current() (string, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader, l.since
}

// await waits until a leader other than not leads, or timeout passes.
func (l *leadership) await(not string, timeout time.Duration) (string, time.Time, error) {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		leader, since, changed := l.leader, l.since, l.cond
		l.mu.Unlock()
		if leader != "" && leader != not {
			return leader, since, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return "", time.Time{}, fmt.Errorf("storm: no manager other than %q acquired the lease within %v", not, timeout)
		}
	}
}

// startManager starts one replica of the manager with extra flags, logging
// into <OutDir>/<name>.log.
func (h *Harness) startManager(name string, onLog func(LogLine), extra ...string) (*Process, error) {
	return h.procs.Start(ProcessSpec{
		Name:    name,
		Path:    filepath.Join(h.OutDir, "bin", "manager"),
		Args:    append(ManagerArgs(h.Kubectl.Kubeconfig), extra...),
		LogPath: filepath.Join(h.OutDir, name+".log"),
		OnLog:   onLog,
	})
}

// withManagers stops the harness's manager, starts the replicas that start
// returns for the time of run, and gives the harness a manager of its own
// again afterwards, whatever run did: the scenarios after it need one. The
// replicas' exits are run's to judge (one may have been killed on purpose).
func (h *Harness) withManagers(scenario string, start func() ([]*Process, error), run func([]*Process) error) (err error) {
	if h.manager != nil {
		// SIGTERM releases the lease; how the process ended is of no
		// interest (Terminate kills it when it does not end in time).
		if err := h.manager.Terminate(10 * time.Second); err != nil {
			h.logf("Stopping the manager: %v", err)
		}
		h.manager = nil
	}
	replicas, err := start()
	defer func() {
		for _, p := range replicas {
			_ = p.Terminate(10 * time.Second)
		}
		m, merr := h.startManager("manager-after-"+scenario, nil)
		h.manager = m
		err = errors.Join(err, merr)
	}()
	if err != nil {
		return err
	}
	return run(replicas)
}
