package gate

import "sync/atomic"

// The gate's admission state lives in one uint64, changed only with
// sync/atomic, so that the uncontended Acquire is a load and one atomic add,
// and Release one atomic add:
//
//	bits  0–21  in-flight count
//	bits 22–41  permit limit in force
//	bits 42–59  admissions since the last fold into Gate.admittedLocked
//	bit  60     latency: TypicalLatency is set (calls with a deadline take the slow path)
//	bit  61     rated: a token bucket applies (the slow path consults it)
//	bit  62     closed
//	bit  63     queued: the waiting room is not empty (new arrivals must not
//	            barge, and Release must hand its permit on)
//
// Keeping the limit in the same word as the in-flight count is what makes a
// resize atomic with respect to admissions: an admission is decided on the
// exact word its atomic operation changed, and Update swaps the limit with a
// compare-and-swap, so no admission can slip in under a stale limit.
//
// The fast path admits with a fetch-and-add rather than a compare-and-swap:
// it adds one call and one admission, then checks the word as it was just
// before. If that word did not allow the admission (another call took the
// last permit between the fast path's first look and its add), it subtracts
// again. Such a lost race leaves a phantom call in the word for a moment;
// phantoms only make admission stricter, and their undo hands the permit on
// to a waiter like a release does.
//
// Every field has headroom for phantoms so that they can neither carry into
// the field above nor borrow from it. The in-flight field is two bits wider
// than the limit. The fast path admits only while the admission field is
// below countFold, a quarter of its range; past that, the slow path moves
// countFold/2 admissions from the field into admittedLocked under the mutex,
// so Stats (which also holds the mutex) reads a consistent total. It moves
// only half the threshold because the field may include phantoms that are
// still to be undone: at least countFold/2 admissions in it are real unless
// more than countFold/2 phantoms are pending. Breaking either bound would
// take tens of thousands of goroutines stopped between the same two adjacent
// instructions at once.
//
// The queued flag is the top bit so that Release tests it with a single
// comparison, which keeps Release small enough to be inlined.
const (
	inflightMask = 1<<22 - 1
	limitShift   = 22
	limitMask    = (1<<20 - 1) << limitShift
	countShift   = 42
	countMask    = (1<<18 - 1) << countShift
	countFold    = 1 << 16 // the fast path stops counting here; see above
	latencyBit   = 1 << 60
	ratedBit     = 1 << 61
	closedBit    = 1 << 62
	queuedBit    = 1 << 63

	// admitOne adds one in-flight call and counts one admission.
	admitOne = 1 + 1<<countShift
	// slowBits send every Acquire to the slow path.
	slowBits = queuedBit | closedBit | ratedBit
	// overReleased is an in-flight count that only a release without an
	// admission (which wraps the field below zero) can reach.
	overReleased = (inflightMask + 1) >> 1
)

func inflight(s uint64) int { return int(s & inflightMask) }
func limit(s uint64) int    { return int(s & limitMask >> limitShift) }
func count(s uint64) uint64 { return s & countMask >> countShift }

// fastAdmissible reports whether the lock-free path may admit against s: no
// flag asks for the slow path, a permit is free, and the admission field is
// below countFold.
func fastAdmissible(s uint64) bool {
	return s&slowBits == 0 && s&inflightMask < s&limitMask>>limitShift && s&countMask < countFold<<countShift
}

func (g *Gate) load() uint64             { return atomic.LoadUint64(&g.state) }
func (g *Gate) add(delta uint64) uint64  { return atomic.AddUint64(&g.state, delta) }
func (g *Gate) cas(old, new uint64) bool { return atomic.CompareAndSwapUint64(&g.state, old, new) }
func (g *Gate) checkOverRelease(s uint64) {
	if s&inflightMask >= overReleased {
		panic("gate: released more permits than were acquired")
	}
}
