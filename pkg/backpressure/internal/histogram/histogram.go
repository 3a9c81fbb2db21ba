// Package histogram holds a lock-free, fixed-bucket histogram of durations.
//
// The gate and the dispatcher record queue waits into it on their slow paths and
// the Prometheus collectors in package runtimemetrics read it at scrape time, so the
// recording side never imports Prometheus and never takes a lock.
package histogram

import (
	"sync/atomic"
	"time"
)

// Bounds are the upper bounds of the buckets, in ascending order. They suit
// waits in front of a downstream call: from half a millisecond, below which a
// wait is noise, to ten seconds, beyond which a queue has stopped absorbing
// jitter and only delays failure.
var Bounds = [...]time.Duration{
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

// Histogram counts durations into the buckets given by Bounds.
//
// The zero value is an empty histogram ready to use. All methods are safe for
// concurrent use.
type Histogram struct {
	// counts[i] counts observations in (Bounds[i-1], Bounds[i]]; the last
	// element counts those above every bound.
	counts [len(Bounds) + 1]atomic.Uint64
	sumNs  atomic.Int64
}

// Observe records one duration. Negative durations are recorded as zero.
func (h *Histogram) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	for i < len(Bounds) && d > Bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot is a point-in-time copy of a Histogram.
type Snapshot struct {
	// Count is the number of observations.
	Count uint64
	// Sum is the total of all observations.
	Sum time.Duration
	// Cumulative[i] is the number of observations at or below Bounds[i].
	Cumulative [len(Bounds)]uint64
}

// Snapshot returns the current counts. Count is derived from the buckets, so
// it always equals the number of observations the buckets account for, as a
// Prometheus histogram requires; Sum may include an observation whose bucket
// the snapshot missed.
func (h *Histogram) Snapshot() Snapshot {
	var s Snapshot
	var running uint64
	for i := range Bounds {
		running += h.counts[i].Load()
		s.Cumulative[i] = running
	}
	s.Count = running + h.counts[len(Bounds)].Load()
	s.Sum = time.Duration(h.sumNs.Load())
	return s
}

// Buckets returns the cumulative counts keyed by upper bound in seconds, the
// form prometheus.NewConstHistogram takes.
func (s Snapshot) Buckets() map[float64]uint64 {
	m := make(map[float64]uint64, len(Bounds))
	for i, b := range Bounds {
		m[b.Seconds()] = s.Cumulative[i]
	}
	return m
}
