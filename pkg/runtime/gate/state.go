package gate

// The gate's admission state lives in one atomic uint64 so that the
// uncontended Acquire is a load and a compare-and-swap, and Release one add:
//
//	bits  0–19  in-flight count
//	bits 20–39  permit limit in force
//	bit  40     queued: the waiting room is not empty (new arrivals must not barge)
//	bit  41     closed
//	bit  42     rated: a token bucket applies (the slow path consults it)
//	bit  43     latency: TypicalLatency is set (calls with a deadline take the slow path)
//	bits 44–63  admissions, modulo 2^20 (the rest is in Gate.admittedLocked)
//
// Keeping the limit in the same word as the in-flight count is what makes a
// resize atomic with respect to admissions: a compare-and-swap admits against
// exactly the limit it read, and Update swaps the limit with a
// compare-and-swap too, so no admission can slip in under a stale limit.
//
// Counting admissions in the word, rather than in a second atomic, saves a
// locked instruction on every Acquire. The field is never allowed to wrap
// outside the mutex: the fast path refuses when it is full, and the slow path
// carries it into admittedLocked under the mutex, so Stats (which also holds the
// mutex) always reads a consistent total.
const (
	inflightMask = 1<<20 - 1
	limitShift   = 20
	limitMask    = inflightMask << limitShift
	queuedBit    = 1 << 40
	closedBit    = 1 << 41
	ratedBit     = 1 << 42
	latencyBit   = 1 << 43
	countShift   = 44
	countMask    = (1<<20 - 1) << countShift
	countWrap    = 1 << 20 // admissions carried into admittedLocked when the field wraps

	// admitOne adds one in-flight call and counts one admission.
	admitOne = 1 + 1<<countShift
	// slowBits send every Acquire to the slow path.
	slowBits = queuedBit | closedBit | ratedBit
)

func inflight(s uint64) int { return int(s & inflightMask) }
func limit(s uint64) int    { return int(s & limitMask >> limitShift) }
func count(s uint64) uint64 { return s & countMask >> countShift }

// fastAdmissible reports whether the lock-free path may admit against s: no
// flag asks for the slow path, a permit is free, and the admission counter
// can be incremented without wrapping.
func fastAdmissible(s uint64) bool {
	return s&slowBits == 0 && s&inflightMask < s&limitMask>>limitShift && s&countMask != countMask
}
