package gate

import "github.com/backpressure-dev/backpressure-operator/pkg/runtime/metrics/histogram"

// Stats is a snapshot of a gate's counters, read at scrape time.
type Stats struct {
	// Limits are the limits in force.
	Limits Limits
	// InFlight is the number of admitted calls not yet released.
	InFlight int
	// Queued is the number of calls in the waiting room.
	Queued int
	// Admitted counts every admission since the gate was made.
	Admitted uint64
	// Rejected counts rejections by reason; every Reason has an entry.
	Rejected map[Reason]uint64
	// QueueWait holds the time spent in the waiting room by every call that
	// waited there, whatever the outcome. Calls admitted at once are not in it.
	QueueWait histogram.Snapshot
}

// Stats returns the gate's counters. It takes the gate's mutex briefly, so it
// is meant for scrapes, not for hot paths.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	s := g.state.Load()
	st := Stats{
		Limits:   g.limits,
		InFlight: inflight(s),
		Queued:   g.room.len,
		Admitted: g.admittedLocked + count(s),
	}
	g.mu.Unlock()
	st.Rejected = make(map[Reason]uint64, len(Reasons))
	for _, r := range Reasons {
		st.Rejected[r] = g.rejected[r].Load()
	}
	st.QueueWait = g.waits.Snapshot()
	return st
}
