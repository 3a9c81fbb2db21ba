package gate

import "time"

// Offerer is the side of a gate that the permit server asks, through the
// Offer stream of api/reserve (package reserve's client), for one of the
// pod's own permits that is idle here, to lend to a call of another pod
// whose own share is full while the reserve is lent out. A permit lent so
// is one of the gate's: it counts in InFlight, so a shrink of the share
// (and its acknowledgement) waits for it as for the gate's own calls.
//
// The Runtime of the root package hands each gate's Offerer to
// Options.Offer, with refusals of its own (a lapsed or bootstrap plan, an
// ask that would outlive what the plan allows) around LendOut and Spare.
type Offerer interface {
	// Lend lends one permit for a borrower whose lease lasts ttl, and
	// returns the function that releases it; ok is false, and release nil,
	// when there is none to lend now. It never waits. The caller holds the
	// permit until the permit server releases it or ttl has passed since
	// the ask arrived, whichever comes first. release may be called more
	// than once, from any goroutine: only the first call releases, since
	// the caller's ttl timer may race the server's release.
	Lend(ttl time.Duration) (release func(), ok bool)
	// Spare returns how many permits Lend could lend now: 0 while a call
	// of the gate waits for a permit.
	Spare() int
}

// LendOut takes one of g's own permits for a call running in another pod,
// when no call of g waits in its waiting room, no loan waits to move onto
// a freed permit (LendRules.ReturnEarly), g is not closed, and more than
// keep of its permits are free (a negative keep is 0). It never waits and
// never borrows from g's Lender: the permit is one g has idle.
//
// The permit counts in InFlight and Stats.LentOutInFlight, not in
// Admitted, so that a smaller limit waits for it as for a call. Its
// Release takes g's usual path: it serves a waiter, or a loan moves onto
// it. Use Permit.ReleaseFunc where the release may come from several
// places at once.
func (g *Gate) LendOut(keep int) (Permit, bool) {
	keep = max(keep, 0)
	for {
		// One compare-and-swap on the admission word decides, against the
		// queued and closed bits and the limit in the same word, as
		// tryAdmit does for a call; the admission field is left alone.
		s := g.load()
		if s&(queuedBit|closedBit) != 0 || limit(s)-inflight(s) <= keep {
			return Permit{}, false
		}
		if g.cas(s, s+1) {
			break
		}
	}
	// Counted after the permit is taken and uncounted before it is
	// released (endLendOut), so that LentOutInFlight never exceeds the
	// lent-out permits in InFlight.
	g.lentOut.Add(1)
	g.lentOutInFlight.Add(1)
	return Permit{g: &Gate{state: queuedBit | 1, lentFrom: g}}, true
}

// Spare returns how many permits LendOut(keep) could lend now: the free
// permits beyond keep, or 0 while a call waits, a loan waits to move, or g
// is closed. It reads only the admission word.
func (g *Gate) Spare(keep int) int {
	s := g.load()
	if s&(queuedBit|closedBit) != 0 {
		return 0
	}
	return max(limit(s)-inflight(s)-max(keep, 0), 0)
}

// endLendOut releases the permit that g, the Gate standing for a permit
// lent out (see LendOut), stands for, in the gate it was taken from.
//
// The stand-in works as lentPermit's does: a Permit is one pointer to a
// Gate, and the stand-in's admission word holds one call and the queued
// bit, so that Release's atomic decrement takes the slow path, which comes
// here; the gates' fast paths do not change.
func (g *Gate) endLendOut() {
	o := g.lentFrom
	o.lentOutInFlight.Add(-1)
	o.release()
}
