//go:build unix

package storm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// faultSettle is the part of a fault scenario's phase left out of its
// goodput: calls admitted before are still draining.
const faultSettle = 2 * time.Second

// faultSchedule is a fault scenario's timeline: d at the typical latency
// under the storm's load, from initial pods, with the autoscaler's steps and
// the phases of the report.
func faultSchedule(d time.Duration, initial int32, scale []schedule.ScaleStep, phases ...schedule.Phase) schedule.Schedule {
	for i := range phases {
		phases[i].Settle = faultSettle
	}
	return schedule.Schedule{
		Duration:          d,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   initial,
		Latency:           []schedule.LatencyStep{{At: 0, Latency: TypicalLatency}},
		Scale:             scale,
		Phases:            phases,
		PodStartDelay:     1500 * time.Millisecond,
	}
}

// faultVariant is a fault scenario's variant: the operator, on the
// scenario's own schedule, with its faults and measurements as events.
func faultVariant(name, description string, s schedule.Schedule, events ...Event) Variant {
	return Variant{Name: name, Description: description, Operator: true, Schedule: &s, Events: events}
}

// waitForPlan polls, from the moment it is called, until a plan published
// after since gives exactly the running pods (want of them) every usable
// permit and, when acked, every running pod acknowledged it and the quota's
// status counts them all. It returns the moment it saw that, or an error
// after timeout.
func waitForPlan(ctx context.Context, st *Stage, since time.Time, want int, acked bool, timeout time.Duration) (published, done time.Time, err error) {
	err = cluster.WaitFor(ctx, timeout, fmt.Sprintf("a plan for %d running pods", want), func() (bool, error) {
		running := st.Workload().Running()
		if len(running) != want {
			return false, nil
		}
		pub := st.Observations().Published()
		for i := len(pub) - 1; i >= 0 && pub[i].Seen.After(since); i-- {
			if !pub[i].Divides(running, Usable()) {
				continue
			}
			if published.IsZero() || pub[i].Seen.Before(published) {
				published = pub[i].Seen
			}
		}
		if published.IsZero() {
			return false, nil
		}
		return !acked || st.Observations().RolledOut(running), nil
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

func (l *leadership) observe(name string) func(cluster.LogLine) {
	return func(line cluster.LogLine) {
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
