// Package queuewait holds the snapshot of how long calls waited in a
// queue, counted into fixed buckets: the time calls spent in a gate's
// waiting room (gate.Stats.QueueWait) and the time tasks waited for a
// dispatcher's worker (dispatch.Stats.QueueWait). Both export it as the
// histograms backpressure_gate_queue_wait_seconds and
// backpressure_dispatcher_queue_wait_seconds.
//
// It is a package of its own so that the gate and the dispatcher, neither
// of which imports the other, return the same type, one an application can
// name; the histogram that records the waits stays inside the library.
package queuewait

import "time"

// NumBounds is the number of bucket bounds.
const NumBounds = 14

// bounds are the upper bounds of the buckets, in ascending order.
var bounds = [NumBounds]time.Duration{
	500 * time.Microsecond,
	1 * time.Millisecond,
	2500 * time.Microsecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	25 * time.Millisecond,
	50 * time.Millisecond,
	100 * time.Millisecond,
	250 * time.Millisecond,
	500 * time.Millisecond,
	1 * time.Second,
	2500 * time.Millisecond,
	5 * time.Second,
	10 * time.Second,
}

// Bounds returns the upper bounds of the buckets, in ascending order. They
// suit waits in front of a downstream call: from half a millisecond, below
// which a wait is noise, to ten seconds, beyond which a queue has stopped
// absorbing jitter and only delays failure.
func Bounds() [NumBounds]time.Duration { return bounds }

// Snapshot is a point-in-time copy of the waits counted so far.
type Snapshot struct {
	// Count is the number of waits.
	Count uint64
	// Sum is the total of all waits.
	Sum time.Duration
	// Cumulative[i] is the number of waits at or below Bounds()[i]; waits
	// above the last bound are counted only in Count.
	Cumulative [NumBounds]uint64
}

// Buckets returns the cumulative counts keyed by upper bound in seconds, the
// form prometheus.NewConstHistogram takes.
func (s Snapshot) Buckets() map[float64]uint64 {
	m := make(map[float64]uint64, NumBounds)
	for i, b := range bounds {
		m[b.Seconds()] = s.Cumulative[i]
	}
	return m
}
