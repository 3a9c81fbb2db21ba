// Package histogram holds a lock-free, fixed-bucket histogram of durations,
// whose snapshot is a queuewait.Snapshot.
//
// The gate and the dispatcher record queue waits into it on their slow paths and
// the Prometheus collectors in package metrics read it at scrape time, so the
// recording side never imports Prometheus and never takes a lock.
package histogram

import (
	"sync/atomic"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"
)

// bounds are queuewait.Bounds(), the upper bounds of the buckets.
var bounds = queuewait.Bounds()

// Histogram counts durations into the buckets of queuewait.Bounds.
//
// The zero value is an empty histogram ready to use. All methods are safe for
// concurrent use.
type Histogram struct {
	// counts[i] counts observations in (bounds[i-1], bounds[i]]; the last
	// element counts those above every bound.
	counts [queuewait.NumBounds + 1]atomic.Uint64
	sumNs  atomic.Int64
}

// Observe records one duration. Negative durations are recorded as zero.
func (h *Histogram) Observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	i := 0
	for i < len(bounds) && d > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot returns the current counts. Count is derived from the buckets, so
// it always equals the number of observations the buckets account for, as a
// Prometheus histogram requires; Sum may include an observation whose bucket
// the snapshot missed.
func (h *Histogram) Snapshot() queuewait.Snapshot {
	var s queuewait.Snapshot
	var running uint64
	for i := range bounds {
		running += h.counts[i].Load()
		s.Cumulative[i] = running
	}
	s.Count = running + h.counts[len(bounds)].Load()
	s.Sum = time.Duration(h.sumNs.Load())
	return s
}
