package queuewait_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"
)

func TestBoundsAscendFromHalfAMillisecondToTenSeconds(t *testing.T) {
	b := queuewait.Bounds()
	if !slices.IsSorted(b[:]) || b[0] != 500*time.Microsecond || b[len(b)-1] != 10*time.Second {
		t.Errorf("Bounds() = %v", b)
	}
	// A caller's copy cannot change the buckets.
	b[0] = time.Hour
	if queuewait.Bounds()[0] != 500*time.Microsecond {
		t.Error("changing the returned array changed the bounds")
	}
}

func TestBucketsKeyCumulativeCountsBySeconds(t *testing.T) {
	s := queuewait.Snapshot{Count: 5, Sum: time.Minute, Cumulative: [queuewait.NumBounds]uint64{2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4}}
	want := map[float64]uint64{
		0.0005: 2, 0.001: 3, 0.0025: 3, 0.005: 3, 0.01: 3, 0.025: 3, 0.05: 4,
		0.1: 4, 0.25: 4, 0.5: 4, 1: 4, 2.5: 4, 5: 4, 10: 4,
	}
	if diff := cmp.Diff(want, s.Buckets()); diff != "" {
		t.Errorf("Buckets() (-want +got):\n%s", diff)
	}
}
