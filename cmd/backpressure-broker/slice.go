package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/broker"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

// slicer keeps the broker's capacity of each gate equal to the permits the
// Runtime's gate of the same name enforces: this pod's slice of the quota's
// published plan, 0 while the plan does not name the pod, and 0 while the
// plan's source has lapsed. The Runtime's gates admit no call here; they
// hold the slice and acknowledge it, counting the broker's leases through
// held (backpressure.Options.Held).
type slicer struct {
	broker *broker.Broker
	gates  []string
	log    *slog.Logger
	kick   chan struct{} // capacity 1: a plan was applied

	mu      sync.Mutex
	rt      *backpressure.Runtime // guarded by mu; nil until New has returned
	applied map[string]int        // guarded by mu; the capacity set, by gate
	stopped bool                  // guarded by mu: lend nothing ever again
}

func newSlicer(b *broker.Broker, gates []string, log *slog.Logger) (*slicer, error) {
	s := &slicer{broker: b, gates: gates, log: log, kick: make(chan struct{}, 1), applied: map[string]int{}}
	// Every gate exists from the start, lending nothing: a borrow is told
	// the reserve here is exhausted, not that there is none.
	for _, g := range gates {
		if err := b.SetCapacity(g, 0); err != nil {
			return nil, fmt.Errorf("--gate: %w", err)
		}
		s.applied[g] = 0
	}
	return s, nil
}

// setRuntime gives the slicer the Runtime whose gates hold the slices.
func (s *slicer) setRuntime(rt *backpressure.Runtime) {
	s.mu.Lock()
	s.rt = rt
	s.mu.Unlock()
	s.sync()
}

// onApplied is the Runtime's Options.OnApplied: it asks run to put the
// new slice in force at once. It must not block.
func (s *slicer) onApplied(backpressure.Applied) {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run syncs the capacities on every applied plan and every interval (a
// lapse of the plan's source changes the gates' limits without a plan),
// until ctx ends.
func (s *slicer) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
		s.sync()
	}
}

// sync puts every gate's slice in force.
func (s *slicer) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gates {
		s.syncLocked(g)
	}
}

// syncLocked reads gate g's limit and puts it in force. Reading and setting
// under one lock keeps a limit read earlier from being set after a later
// one, which would lend a shrunk slice's permits again after held had
// counted the leases against it.
func (s *slicer) syncLocked(g string) {
	limit := 0
	if !s.stopped && s.rt != nil {
		if gt, err := s.rt.Gate(g); err == nil {
			limit = gt.Limits().Permits
		}
	}
	if prev, ok := s.applied[g]; ok && prev == limit {
		return
	}
	if err := s.broker.SetCapacity(g, limit); err != nil {
		s.log.Error("Could not put the slice in force", "gate", g, "permits", limit, "err", err)
		return
	}
	s.log.Info("Slice in force", "gate", g, "permits", limit, "was", s.applied[g])
	s.applied[g] = limit
}

// held is the Runtime's Options.Held: the leases outstanding on gate g,
// once its capacity is the limit the Runtime's gate enforces now; -1 while
// the broker learns, since an earlier run of it may have lent permits it
// does not know of, so that no smaller slice is acknowledged before it
// could have been honoured. A gate the broker does not lend (another quota
// of the same ConfigMap) holds nothing.
func (s *slicer) held(g string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.applied[g]; !ok {
		return 0
	}
	s.syncLocked(g)
	if time.Now().Before(s.broker.LearningUntil()) {
		return -1
	}
	return s.broker.Leases(g)
}

// stop lends nothing from now on, on every gate; leases already lent run
// until they are returned or expire.
func (s *slicer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for _, g := range s.gates {
		s.syncLocked(g)
	}
}
