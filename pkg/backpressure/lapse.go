package backpressure

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// followLapses checks the source's confirmations every lapseCheckInterval
// until ctx ends, and lapses or restores each gate (see
// Options.SourceLapseMargin).
func (r *Runtime) followLapses(ctx context.Context, live reload.Liveness) {
	t := time.NewTicker(lapseCheckInterval)
	defer t.Stop()
	for {
		live, at := live.Confirmed()
		r.checkLapses(time.Now(), live, at)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkLapses lapses every gate whose source was last confirmed at at (or is
// live) too long before now, and restores every lapsed gate that is not.
// Each change is logged as "Applied plan" with the permits then in force,
// besides the line that explains it: a reader of those lines alone (the
// example app's e2e harness) then always knows what the gate enforces.
// OnApplied is not called: the plan in force is the same, and OnApplied
// reports plans, on the source's goroutine.
func (r *Runtime) checkLapses(now time.Time, live bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteConfirmedLocked(live, at)
	for _, name := range slices.Sorted(maps.Keys(r.gates)) {
		e := r.gates[name]
		limit, lapses := r.lapseLimit(e)
		lapsed := lapses && !live && now.Sub(at) >= limit
		if lapsed == e.lapsed {
			continue
		}
		e.lapsed = lapsed
		if err := e.enforce(e.plan); err != nil {
			r.log.Error(err, "Could not resize the gate", "gate", name)
			continue
		}
		r.metrics.lapsed.WithLabelValues(name).Set(boolGauge(lapsed))
		if lapsed {
			r.log.Info("Plan source has not confirmed the plan for nearly the operator's unacknowledged delay; the gate admits nothing until it does",
				"gate", name, "unconfirmedFor", now.Sub(at).Round(time.Millisecond),
				"unacknowledgedDelay", e.plan.UnacknowledgedDelay(), "lapsedAfter", limit)
		} else {
			r.log.Info("Plan source confirms the plan again; the gate enforces its share",
				"gate", name, "epoch", e.plan.Epoch, "revision", e.plan.Revision, "permits", gateLimits(e.plan).Permits)
		}
		// The keys are put's: the example app's e2e harness parses them.
		r.log.Info("Applied plan", "gate", name, "hash", e.plan.Hash, "permits", gateLimits(e.inForce()).Permits)
	}
}

// lapseLimit returns how long the gate's source may go without confirming
// its plan before the gate lapses, and false when it never lapses:
//   - a bootstrap plan is this pod's own conservative share, which the
//     operator never counted;
//   - a plan without the delay comes from an operator that did not say
//     when it hands a share over;
//   - a gate whose smaller shares the operator waits for this pod's
//     acknowledgement of never has its share handed over while the pod may
//     enforce it: a shrink it did not read is never acknowledged.
//
// The limit is the delay less the margin and the plan's deadline, so that
// the calls in flight when it lapses end before the operator's delay does.
func (r *Runtime) lapseLimit(e *enforcer) (time.Duration, bool) {
	delay := e.plan.UnacknowledgedDelay()
	if e.bootstrap || delay <= 0 || r.src.Acknowledged(e.plan.Gate, e.plan.Epoch) {
		return 0, false
	}
	return max(delay-r.lapseMargin-e.plan.Deadline(), 0), true
}
