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

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// TestStressLendOutUnderLoad runs the gate's callers, goroutines lending
// its permits out and random limit changes at once, and checks that the
// permits held, the callers' and those lent out together, are never more
// than the largest limit in force since the holder started to take its
// permit (see TestStressResizeUnderLoad for why that bound holds), that
// each permit lent out is released exactly once though two goroutines
// race to release it, and that nothing is held at the end.
func TestStressLendOutUnderLoad(t *testing.T) {
	const callers, lenders = 24, 8
	duration := time.Second
	if testing.Short() {
		duration = 200 * time.Millisecond
	}
	baseGoroutines := runtime.NumGoroutine()
	g := mustNew(t, gate.Limits{Permits: 8, QueueCapacity: 16, MaxQueueWait: time.Millisecond})
	var hist limitHistory
	hist.add(8)

	var (
		holding, highWater   atomic.Int64
		admitted, lentOut    atomic.Uint64
		releases, violations atomic.Int64
		firstViol            atomic.Pointer[string]
	)
	check := func(n0 int64) {
		h := holding.Add(1)
		if bound := hist.maxSince(n0); h > int64(bound) {
			if violations.Add(1) == 1 {
				msg := fmt.Sprintf("%d permits held, but no limit in force since the last was taken exceeded %d", h, bound)
				firstViol.Store(&msg)
			}
		}
		for hw := highWater.Load(); h > hw && !highWater.CompareAndSwap(hw, h); hw = highWater.Load() {
		}
	}
	stop := make(chan struct{})
	var resizeMu sync.Mutex
	resize := func(rng *rand.Rand) {
		l := gate.Limits{Permits: rng.IntN(17), QueueCapacity: rng.IntN(32), MaxQueueWait: time.Duration(rng.IntN(2000)) * time.Microsecond}
		resizeMu.Lock()
		defer resizeMu.Unlock()
		if !hist.add(l.Permits) {
			return
		}
		if err := g.Update(l); err != nil {
			t.Error(err)
		}
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 1))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(200+rng.IntN(1800)) * time.Microsecond):
			}
			resize(rng)
		}
	})
	for w := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n0 := hist.n.Load()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(3000))*time.Microsecond)
				p, err := g.Acquire(ctx)
				cancel()
				if err != nil {
					if _, ok := errors.AsType[*gate.Rejection](err); !ok && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("unexpected error %v", err)
						return
					}
					runtime.Gosched()
					continue
				}
				admitted.Add(1)
				check(n0)
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
				holding.Add(-1)
				p.Release()
				// Pauses between calls leave permits idle to lend out.
				time.Sleep(time.Duration(rng.IntN(400)) * time.Microsecond)
			}
		})
	}
	for w := range lenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n0 := hist.n.Load()
				keep := rng.IntN(3)
				if g.Spare(keep) < 0 {
					t.Error("Spare is negative")
				}
				p, ok := g.LendOut(keep)
				if !ok {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					continue
				}
				lentOut.Add(1)
				check(n0)
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				holding.Add(-1)
				// The server's release and the ttl's timer race, as in the
				// stream client: only one releases.
				release := p.ReleaseFunc()
				var once sync.Once
				counted := func() { release(); once.Do(func() { releases.Add(1) }) }
				var both sync.WaitGroup
				both.Go(counted)
				both.Go(counted)
				both.Wait()
			}
		})
	}

	time.Sleep(duration)
	close(stop)
	wg.Wait()

	if v := violations.Load(); v > 0 {
		t.Errorf("%d times more permits held than the limit in force; first: %s", v, *firstViol.Load())
	}
	st := g.Stats()
	if st.InFlight != 0 || st.LentOutInFlight != 0 || st.Queued != 0 || holding.Load() != 0 {
		t.Errorf("at the end: in flight %d, lent out in flight %d, queued %d, held %d; want all 0",
			st.InFlight, st.LentOutInFlight, st.Queued, holding.Load())
	}
	if st.LentOut != lentOut.Load() || releases.Load() != int64(lentOut.Load()) {
		t.Errorf("Stats().LentOut = %d, releases %d; the lenders took %d", st.LentOut, releases.Load(), lentOut.Load())
	}
	if st.Admitted != admitted.Load() {
		t.Errorf("Stats().Admitted = %d, callers saw %d admissions (permits lent out must not count)", st.Admitted, admitted.Load())
	}
	eventually(t, "every goroutine has exited", func() bool { return runtime.NumGoroutine() <= baseGoroutines })
	t.Logf("%v: %d admitted, %d lent out, high-water %d of max limit 16", duration, admitted.Load(), lentOut.Load(), highWater.Load())
	if admitted.Load() == 0 || lentOut.Load() == 0 {
		t.Errorf("the stress did not exercise the gate: %d admitted, %d lent out", admitted.Load(), lentOut.Load())
	}
}
