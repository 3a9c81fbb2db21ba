package backpressure

import (
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// offerer is the gate.Offerer the Runtime hands Options.Offer for one
// gate: the gate's LendOut and Spare, refused whenever a permit lent out
// could be one the pod may not hold (see mayLendLocked).
type offerer struct {
	r *Runtime
	e *enforcer
}

var _ gate.Offerer = (*offerer)(nil)

// Lend lends one of the gate's own permits, keeping Options.OfferKeep,
// for a borrower whose lease lasts ttl.
func (o *offerer) Lend(ttl time.Duration) (release func(), ok bool) {
	// Under the read lock, so that no lapse or new plan comes between the
	// check and the permit: checkLapses and put change both under the
	// write lock, and a permit taken before a lapse is one of the calls in
	// flight it waits for.
	o.r.mu.RLock()
	defer o.r.mu.RUnlock()
	if ttl <= 0 || !o.r.mayLendLocked(o.e, ttl, time.Now()) {
		return nil, false
	}
	p, ok := o.e.gate.LendOut(o.r.offerKeep)
	if !ok {
		return nil, false
	}
	return p.ReleaseFunc(), true
}

// Spare returns how many permits Lend could lend now, for an ask that
// ends at once: 0 whenever Lend refuses every ask.
func (o *offerer) Spare() int {
	o.r.mu.RLock()
	defer o.r.mu.RUnlock()
	if !o.r.mayLendLocked(o.e, 0, time.Now()) {
		return 0
	}
	return o.e.gate.Spare(o.r.offerKeep)
}

// mayLendLocked reports whether e's gate may lend a permit out, at now,
// for a lease of ttl. It refuses
//   - once the Runtime has stopped offering (stopOffersLocked);
//   - while the gate has lapsed: it enforces a share of 0, and its permits
//     may be the operator's to give to other pods by now;
//   - on a bootstrap plan: the pod's own conservative share, which the
//     operator never counted, so that lending it would make the permits
//     enforced by pods exceed the contract;
//   - a ttl that a lapse could outlive. The lapse arithmetic (lapseLimit)
//     lapses the gate at the last confirmation, at, plus the delay less
//     the margin and the plan's deadline, so that the calls in flight then
//     end by at plus the delay less the margin, before the operator may
//     give the share away. A permit lent now is held until now+ttl at
//     most, and any later lapse counts from a confirmation no earlier
//     than at (now itself while the source is live), so a permit lent
//     within at + limit + deadline − now ends within the same bound as
//     the calls. While the source is live that is the delay less the
//     margin, far above a call's lease; as an unconfirmed source nears
//     its lapse it falls to the deadline. A fixed bound of the deadline
//     plus the margin would let a permit lent just before a lapse be held
//     a margin past the calls, into the time the margin keeps for a dead
//     watch to go unnoticed.
//
// The bound holds without a deadline in the plan: it then enters neither
// the lapse's limit nor the bound, and a permit, whose end is known, ends
// by at plus the delay less the margin all the same.
//
// A gate that does not lapse because the operator waits for this pod's
// acknowledgement of its smaller shares has its lent permits counted in
// its calls in flight, which that acknowledgement waits for. But a pod
// that dies acknowledges nothing: the operator then holds its share for
// the delay from when it finds the pod gone, which is after the pod's
// end, while a permit the pod lent lives on in the borrower's call. So a
// lease longer than the delay less the margin is refused whenever the plan
// carries the delay. A plan without it never lapses and bounds nothing.
func (r *Runtime) mayLendLocked(e *enforcer, ttl time.Duration, now time.Time) bool {
	if r.offersStopped || e.lapsed || e.bootstrap {
		return false
	}
	if delay := e.plan.UnacknowledgedDelay(); delay > 0 && ttl > delay-r.lapseMargin {
		return false
	}
	limit, lapses := r.lapseLimit(e)
	if !lapses {
		return true
	}
	var unconfirmed time.Duration
	if !r.confirmedLive {
		unconfirmed = now.Sub(r.confirmedAt)
	}
	return ttl <= limit+e.plan.Deadline()-unconfirmed
}

// noteConfirmedLocked records the source's confirmation, as checkLapses
// last read it, for mayLendLocked.
func (r *Runtime) noteConfirmedLocked(live bool, at time.Time) {
	r.confirmedLive, r.confirmedAt = live, at
}

// offerGate hands Options.Offer the Offerer of e's gate, named name, and
// keeps the stop it returns. It runs without r.mu, so that Offer may use
// the Offerer at once; a Runtime that stopped meanwhile stops it at once.
func (r *Runtime) offerGate(name string, e *enforcer) {
	if r.offer == nil {
		return
	}
	stop := r.offer(name, &offerer{r: r, e: e})
	if stop == nil {
		return
	}
	r.mu.Lock()
	stopped := r.offersStopped
	if !stopped {
		e.stopOffer = stop
	}
	r.mu.Unlock()
	if stopped {
		stop()
	}
}

// stopOffers stops offering every gate's permits: Lend and Spare refuse
// from now on, and the stop of each gate's Options.Offer is called. The
// permits lent out already are held until their releases, and the gates'
// drains wait for them.
func (r *Runtime) stopOffers() {
	r.mu.Lock()
	r.offersStopped = true
	var stops []func()
	for _, e := range r.gates {
		if e.stopOffer != nil {
			stops = append(stops, e.stopOffer)
			e.stopOffer = nil
		}
	}
	r.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// initialConfirmation returns what src says of its confirmation when New
// has read it, so that the bound of mayLendLocked holds before the first
// check of the lapses; a source that does not know when it is current
// never lapses, and counts as live.
func initialConfirmation(src reload.Source) (live bool, at time.Time) {
	if l, ok := src.(reload.Liveness); ok {
		return l.Confirmed()
	}
	return true, time.Time{}
}
