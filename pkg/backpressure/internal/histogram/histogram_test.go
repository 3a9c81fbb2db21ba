package histogram

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"
)

func TestObserveBuckets(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{
		-time.Second,           // clamped to 0: first bucket
		500 * time.Microsecond, // on the bound: first bucket (bounds are inclusive)
		501 * time.Microsecond, // second bucket
		30 * time.Millisecond,  // (25ms, 50ms]
		time.Minute,            // above every bound: +Inf only
	} {
		h.Observe(d)
	}
	got := h.Snapshot()

	want := queuewait.Snapshot{Count: 5, Sum: 500*time.Microsecond + 501*time.Microsecond + 30*time.Millisecond + time.Minute}
	cum := []uint64{2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4}
	copy(want.Cumulative[:], cum)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Snapshot() mismatch (-want +got):\n%s", diff)
	}
}

func TestConcurrentObserve(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Observe(time.Duration(g*1000+i) * time.Millisecond / 100)
			}
		})
	}
	wg.Wait()
	if s := h.Snapshot(); s.Count != 8000 {
		t.Errorf("Count = %d, want 8000", s.Count)
	}
}
