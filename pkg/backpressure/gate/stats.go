package gate

import "github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"

// Stats is a snapshot of a gate's counters, read at scrape time.
type Stats struct {
	// Limits are the limits in force.
	Limits Limits
	// InFlight is the number of admitted calls not yet released, with the
	// permits lent out to other pods' calls (LentOutInFlight). A call
	// racing another for the last permit may be in it for a moment.
	InFlight int
	// Queued is the number of calls in the waiting room.
	Queued int
	// Admitted counts every admission since the gate was made. It never
	// decreases; a call racing another for the last permit may be counted a
	// moment before the admission it stands for.
	Admitted uint64
	// Rejected counts rejections by reason; every Reason has an entry.
	Rejected map[Reason]uint64
	// Borrowed counts the calls admitted on a permit the gate's Lender lent
	// (not in Admitted); NotLent the times the Lender had none to lend;
	// LendFailed the times it could not be asked or did not answer in time
	// (the call then went on with the gate's own permits). See SetLender.
	Borrowed, NotLent, LendFailed uint64
	// ReturnedEarly counts the borrowed calls whose loans went back before
	// they ended, the calls going on on the gate's own permits
	// (LendRules.ReturnEarly).
	ReturnedEarly uint64
	// BorrowedInFlight is the number of calls running on lent permits, not
	// in InFlight: with InFlight it is every call the gate has running, so
	// that (InFlight + BorrowedInFlight) ÷ (Admitted + Borrowed) per
	// second is the calls' mean latency (Little's law), whichever permits
	// they ran on.
	BorrowedInFlight int
	// LentOut counts the gate's own permits lent out to calls of other
	// pods (LendOut); not in Admitted.
	LentOut uint64
	// LentOutInFlight is the number of permits lent out and not yet
	// released. They are in InFlight, since they are the gate's own
	// permits, but they are not this pod's demand: InFlight less
	// LentOutInFlight is the calls of its own it has running on them.
	LentOutInFlight int
	// QueueWait holds the time spent in the waiting room by every call that
	// waited there, whatever the outcome. Calls admitted at once are not in it.
	QueueWait queuewait.Snapshot
}

// Stats returns the gate's counters. It takes the gate's mutex briefly, so it
// is meant for scrapes, not for hot paths.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	s := g.load()
	st := Stats{
		Limits:   g.limits,
		InFlight: inflight(s),
		Queued:   g.room.Len(),
		Admitted: g.admittedLocked + count(s),
	}
	// A phantom (see state.go) may be in the word for a moment; never let
	// the counter appear to go backwards when it leaves.
	if st.Admitted < g.admittedShown {
		st.Admitted = g.admittedShown
	}
	g.admittedShown = st.Admitted
	g.mu.Unlock()
	st.Rejected = make(map[Reason]uint64, len(Reasons))
	for _, r := range Reasons {
		st.Rejected[r] = g.rejected[r].Load()
	}
	st.Borrowed, st.NotLent, st.LendFailed = g.borrowed.Load(), g.notLent.Load(), g.lendFailed.Load()
	st.ReturnedEarly = g.returnedEarly.Load()
	st.BorrowedInFlight = int(g.lentInFlight.Load())
	st.LentOut = g.lentOut.Load()
	st.LentOutInFlight = int(g.lentOutInFlight.Load())
	st.QueueWait = g.waits.Snapshot()
	return st
}

// InFlight returns the number of admitted calls not yet released, as
// Stats.InFlight does, but reads only the admission word: no mutex, no
// allocation, so that a caller may watch a shrinking gate drain (say, to
// acknowledge a smaller share once the calls in flight fit it) without
// slowing Acquire or Release. A call racing another for the last permit may
// be counted for a moment, which only delays such a caller.
func (g *Gate) InFlight() int { return inflight(g.load()) }
