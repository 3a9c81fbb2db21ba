package gate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// limitHistory records every permit limit the stress test puts in force, in
// order, for lock-free reading by the checkers: an entry is written before
// the length that exposes it.
type limitHistory struct {
	n       atomic.Int64
	permits [1 << 16]int32
}

func (h *limitHistory) add(p int) bool {
	i := h.n.Load()
	if i == int64(len(h.permits)) {
		return false
	}
	h.permits[i] = int32(p)
	h.n.Store(i + 1)
	return true
}

// maxSince returns the largest limit that can have been in force at any
// instant since the history had n0 entries. The entry before the last one
// seen is included because the last may have been recorded but not yet
// applied; entries recorded later are all visible by now, because each is
// recorded before Update puts it in force.
func (h *limitHistory) maxSince(n0 int64) int {
	hi := 0
	for i := max(0, n0-2); i < h.n.Load(); i++ {
		hi = max(hi, int(h.permits[i]))
	}
	return hi
}

// TestStressResizeUnderLoad hammers one gate from 1,200 goroutines while its
// limits change at random every few milliseconds, and checks that an
// admission only happens under the limit in force: whenever a caller holds a
// permit, the number of callers holding one is at most the largest limit in
// force since that caller started to acquire. (The last admission among the
// calls in flight happened after this caller started and was made while the
// in-flight count, which has not grown since, was below the limit in force.)
// It ends with nothing in flight, nobody waiting, every goroutine gone and
// the gate's counters equal to what the callers saw.
func TestStressResizeUnderLoad(t *testing.T) {
	const goroutines = 1200
	duration := 2 * time.Second
	if testing.Short() {
		duration = 300 * time.Millisecond
	}
	baseGoroutines := runtime.NumGoroutine()

	initial := gate.Limits{Permits: 16, QueueCapacity: 64, MaxQueueWait: 2 * time.Millisecond}
	g := mustNew(t, initial)
	var hist limitHistory
	hist.add(initial.Permits)

	var (
		holding    atomic.Int64 // callers between Acquire's return and Release
		highWater  atomic.Int64
		admitted   atomic.Uint64
		ctxErrs    atomic.Uint64
		rejected   [len(gate.Reasons) + 1]atomic.Uint64
		violations atomic.Int64
		firstViol  atomic.Pointer[string]
		resizes    atomic.Int64
	)
	stop := make(chan struct{})

	// resize puts random limits in force. Resizes are serialised, so that at
	// most the last recorded limit is still pending, as maxSince assumes.
	var resizeMu sync.Mutex
	draining := false // guarded by resizeMu; set once the final limits are in force
	resize := func(rng *rand.Rand) {
		l := gate.Limits{
			Permits:       rng.IntN(65), // includes 0: admit nobody for a while
			QueueCapacity: rng.IntN(300),
			MaxQueueWait:  time.Duration(rng.IntN(4000)) * time.Microsecond,
		}
		if rng.IntN(4) == 0 {
			l.RatePerSecond, l.Burst = float64(5000+rng.IntN(50000)), 1+rng.IntN(100)
		}
		if rng.IntN(3) == 0 {
			l.TypicalLatency = time.Duration(rng.IntN(2000)) * time.Microsecond
		}
		resizeMu.Lock()
		defer resizeMu.Unlock()
		if draining || !hist.add(l.Permits) {
			return
		}
		if err := g.Update(l); err != nil {
			t.Error(err)
			return
		}
		resizes.Add(1)
	}
	// Resizes come every few milliseconds from a timer, and also from some
	// of the callers every few dozen calls, so that they stay frequent
	// relative to the calls however loaded the machine is.
	var resizer sync.WaitGroup
	resizer.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rng.IntN(3500)) * time.Microsecond):
			}
			resize(rng)
		}
	})

	var workers sync.WaitGroup
	for w := range goroutines {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch rng.IntN(4) {
				case 0:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(5000))*time.Microsecond)
				case 1:
					ctx, cancel = context.WithCancel(ctx)
					if rng.IntN(2) == 0 {
						time.AfterFunc(time.Duration(rng.IntN(2000))*time.Microsecond, cancel)
					}
				}
				if w < 8 && rng.IntN(32) == 0 {
					resize(rng)
				}
				n0 := hist.n.Load()
				var p gate.Permit
				var err error
				if rng.IntN(5) == 0 {
					p, err = g.TryAcquire(ctx)
				} else {
					p, err = g.Acquire(ctx)
				}
				cancel()
				if err != nil {
					var r *gate.Rejection
					switch {
					case errors.As(err, &r):
						rejected[r.Reason].Add(1)
					case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
						ctxErrs.Add(1)
					default:
						t.Errorf("unexpected error %v", err)
						return
					}
					if rng.IntN(2) == 0 { // back off, as a shed caller would
						time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
					}
					continue
				}
				admitted.Add(1)
				h := holding.Add(1)
				if bound := hist.maxSince(n0); h > int64(bound) {
					if violations.Add(1) == 1 {
						msg := fmt.Sprintf("%d callers hold permits, but no limit in force since this one started exceeded %d", h, bound)
						firstViol.Store(&msg)
					}
				}
				for hw := highWater.Load(); h > hw && !highWater.CompareAndSwap(hw, h); hw = highWater.Load() {
				}
				switch rng.IntN(3) {
				case 0:
					runtime.Gosched()
				case 1:
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				}
				holding.Add(-1)
				switch rng.IntN(3) {
				case 0:
					p.Release()
					p.Release() // idempotent
				case 1:
					rel := p.ReleaseFunc()
					rel()
					rel()
				default:
					p.Release()
				}
			}
		})
	}

	time.Sleep(duration)
	close(stop)
	resizer.Wait()
	// Whoever still waits must get out: give the gate room and no rate.
	resizeMu.Lock()
	draining = true
	hist.add(64)
	err := g.Update(gate.Limits{Permits: 64, QueueCapacity: 64})
	resizeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	workers.Wait()

	if v := violations.Load(); v > 0 {
		t.Errorf("%d admissions above the limit in force; first: %s", v, *firstViol.Load())
	}
	st := g.Stats()
	if st.InFlight != 0 || st.Queued != 0 || holding.Load() != 0 {
		t.Errorf("at the end: InFlight %d, Queued %d, holding %d; want all 0", st.InFlight, st.Queued, holding.Load())
	}
	if st.Admitted != admitted.Load() {
		t.Errorf("Stats().Admitted = %d, callers saw %d admissions", st.Admitted, admitted.Load())
	}
	gotRejected := map[gate.Reason]uint64{}
	for _, r := range gate.Reasons {
		gotRejected[r] = rejected[r].Load()
	}
	if diff := cmp.Diff(gotRejected, st.Rejected); diff != "" {
		t.Errorf("Stats().Rejected differs from what callers saw (-callers +stats):\n%s", diff)
	}
	eventually(t, "every goroutine has exited", func() bool { return runtime.NumGoroutine() <= baseGoroutines })

	t.Logf("%d goroutines, %v, %d resizes: %d admitted, %d context errors, rejected %v, high-water %d of max limit 64",
		goroutines, duration, resizes.Load(), admitted.Load(), ctxErrs.Load(), gotRejected, highWater.Load())
	if admitted.Load() == 0 || resizes.Load() < 10 {
		t.Errorf("the stress did not exercise the gate: %d admissions, %d resizes", admitted.Load(), resizes.Load())
	}
}

// TestFastPathRaceAtTheLimit makes goroutines race for the last permits on
// the lock-free path, where a lost race is undone after the fact (see
// state.go), and checks that no more callers ever hold permits than the
// limit, that nothing is left in flight, and that the admission count is
// exact. It runs until such races have happened many times.
func TestFastPathRaceAtTheLimit(t *testing.T) {
	const permits = 3
	g := mustNew(t, gate.Limits{Permits: permits})
	ctx := context.Background()
	var holding, admitted, over atomic.Int64
	deadline := time.Now().Add(5 * time.Second)
	for g.Phantoms() < 100 && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		for range 4 * runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for i := range 2000 {
					p, err := g.TryAcquire(ctx)
					if err != nil {
						continue
					}
					admitted.Add(1)
					if holding.Add(1) > permits {
						over.Add(1)
					}
					if i%7 == 0 {
						runtime.Gosched()
					}
					holding.Add(-1)
					p.Release()
				}
			})
		}
		wg.Wait()
	}
	if g.Phantoms() == 0 {
		t.Fatal("no fast-path race was lost in 5s; the undo path was not exercised")
	}
	if over.Load() > 0 {
		t.Errorf("%d times more than %d callers held permits", over.Load(), permits)
	}
	st := g.Stats()
	if st.InFlight != 0 || st.Admitted != uint64(admitted.Load()) {
		t.Errorf("Stats: in flight %d, admitted %d; want 0 and %d", st.InFlight, st.Admitted, admitted.Load())
	}
	t.Logf("%d admissions, %d lost races undone", admitted.Load(), g.Phantoms())
}
