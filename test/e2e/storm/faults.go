//go:build unix

package storm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
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

// faultSchedule is a fault scenario's timeline: d at the typical latency
// under the storm's load, from initial pods, with the autoscaler's steps and
// the phases of the report.
func faultSchedule(d time.Duration, initial int32, scale []ScaleStep, phases ...Phase) Schedule {
	for i := range phases {
		phases[i].Settle = faultSettle
	}
	return Schedule{
		Duration:          d,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   initial,
		Latency:           []LatencyStep{{At: 0, Latency: TypicalLatency}},
		Scale:             scale,
		Phases:            phases,
		PodStartDelay:     1500 * time.Millisecond,
	}
}

// faultVariant is a fault scenario's variant: the operator, on the
// scenario's own schedule, with its faults.
func faultVariant(name, description string, s Schedule, faults ...Fault) Variant {
	return Variant{Name: name, Description: description, Operator: true, Schedule: &s, Faults: faults}
}

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

// replaceManager stops the harness's manager, for a scenario that runs
// replicas of its own, and returns the function that gives the harness a
// manager again afterwards: the scenarios after it need one.
func (h *Harness) replaceManager(scenario string) (restore func() error) {
	if h.manager != nil {
		// SIGTERM releases the lease; how the process ended is of no
		// interest (Terminate kills it when it does not end in time).
		if err := h.manager.Terminate(10 * time.Second); err != nil {
			h.logf("Stopping the manager: %v", err)
		}
		h.manager = nil
	}
	return func() error {
		m, err := h.startManager("manager-after-"+scenario, nil)
		h.manager = m
		return err
	}
}

// supervisedManager is one replica of the manager started again whenever its
// process ends, as the kubelet restarts a container: a manager that loses
// its lease exits, as controller-runtime's managers do.
type supervisedManager struct {
	h     *Harness
	name  string
	flags []string
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	cur      *Process
	restarts []time.Time
}

// superviseManager starts the replica and its supervision. Stop it.
func (h *Harness) superviseManager(name string, flags ...string) (*supervisedManager, error) {
	s := &supervisedManager{h: h, name: name, flags: flags, stop: make(chan struct{}), done: make(chan struct{})}
	p, err := h.startManager(name, nil, flags...)
	if err != nil {
		return nil, err
	}
	s.cur = p
	go s.loop()
	return s, nil
}

// restartDelay is the pause before a replica that ended starts again: the
// kubelet's first restart of a container is immediate; a replica that
// cannot reach the API server at start ends again at once.
const restartDelay = 500 * time.Millisecond

func (s *supervisedManager) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-cur.Done():
		}
		s.h.logf("%s exited (%v); starting it again", cur.Name(), cur.Err())
		select {
		case <-s.stop:
			return
		case <-time.After(restartDelay):
		}
		s.mu.Lock()
		n := len(s.restarts) + 1
		p, err := s.h.startManager(fmt.Sprintf("%s-restart-%d", s.name, n), nil, s.flags...)
		if err != nil {
			s.mu.Unlock()
			s.h.logf("Starting %s again: %v", s.name, err)
			return
		}
		s.cur = p
		s.restarts = append(s.restarts, time.Now())
		s.mu.Unlock()
	}
}

// Restarts returns when the replica was started again.
func (s *supervisedManager) Restarts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restarts)
}

// Stop ends the supervision and the replica.
func (s *supervisedManager) Stop() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.cur.Terminate(10 * time.Second)
}
