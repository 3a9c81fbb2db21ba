package gate_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/semaphore"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	metrics "github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// benchLimits is a share without a rate and without TypicalLatency: a
// semaphore with a waiting room, the same job x/sync's semaphore does, so
// that the comparison is like for like. BenchmarkAcquireRelease/
// gate_deadline_check adds TypicalLatency, which costs the fast path a call
// to ctx.Deadline.
func benchLimits(permits int) gate.Limits {
	return gate.Limits{
		Permits:        permits,
		QueueCapacity:  permits,
		MaxQueueWait:   100 * time.Millisecond,
		AcquireTimeout: 100 * time.Millisecond,
	}
}

// newBenchGate returns a gate exported through a metrics collector on a
// registry, as in production, and scrapes it once so that the collector is
// known to work.
func newBenchGate(b *testing.B, l gate.Limits) *gate.Gate {
	b.Helper()
	g, err := gate.New("bench", l)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.NewGateCollector(reg)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Add(g); err != nil {
		b.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "backpressure_gate_in_flight"); err != nil || n != 1 {
		b.Fatalf("gate not exported: %d series, %v", n, err)
	}
	return g
}

// refusingLender is a Lender that a benchmark of the local path must never
// reach: the gate's own permits are free.
type refusingLender struct{ b *testing.B }

func (l refusingLender) Lend(context.Context, time.Duration, time.Duration) (gate.Loan, error) {
	l.b.Error("the gate borrowed while its own permits were free")
	return nil, gate.ErrNotLent
}

// BenchmarkAcquireRelease measures one uncontended Acquire and Release;
// gate_with_lender is the same gate set to borrow from a reserve, whose
// own permits are free: the local path, which must cost what it did
// without a lender.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	const permits = 64
	b.Run("gate", func(b *testing.B) { benchGate(b, benchLimits(permits)) })
	withLatency := benchLimits(permits)
	withLatency.TypicalLatency = 200 * time.Millisecond
	b.Run("gate_deadline_check", func(b *testing.B) { benchGate(b, withLatency) })
	b.Run("gate_with_lender", func(b *testing.B) {
		benchGateWith(b, benchLimits(permits), func(g *gate.Gate) { g.SetLender(refusingLender{b}) })
	})
	b.Run("xsync", func(b *testing.B) {
		s := semaphore.NewWeighted(permits)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			s.Release(1)
		}
	})
	b.Run("chan", func(b *testing.B) {
		s := make(chan struct{}, permits)
		b.ReportAllocs()
		for b.Loop() {
			select {
			case s <- struct{}{}:
			case <-ctx.Done():
				b.Fatal(ctx.Err())
			}
			<-s
		}
	})
}

func benchGate(b *testing.B, l gate.Limits) { benchGateWith(b, l, func(*gate.Gate) {}) }

// benchGateWith is benchGate on a gate that set changes first.
func benchGateWith(b *testing.B, l gate.Limits, set func(*gate.Gate)) {
	ctx := context.Background()
	g := newBenchGate(b, l)
	set(g)
	b.ReportAllocs()
	for b.Loop() {
		p, err := g.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Release()
	}
}

// BenchmarkAcquireReleaseParallel measures Acquire and Release from every
// processor at once, with enough permits that nobody waits.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	ctx := context.Background()
	permits := 64 * max(1, runtime.GOMAXPROCS(0))
	parallel := func(b *testing.B, g *gate.Gate) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := g.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		})
	}
	b.Run("gate", func(b *testing.B) { parallel(b, newBenchGate(b, benchLimits(permits))) })
	b.Run("gate_with_lender", func(b *testing.B) {
		g := newBenchGate(b, benchLimits(permits))
		g.SetLender(refusingLender{b})
		parallel(b, g)
	})
	b.Run("xsync", func(b *testing.B) {
		s := semaphore.NewWeighted(int64(permits))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Acquire(ctx, 1); err != nil {
					b.Fatal(err)
				}
				s.Release(1)
			}
		})
	})
	b.Run("chan", func(b *testing.B) {
		s := make(chan struct{}, permits)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				select {
				case s <- struct{}{}:
				case <-ctx.Done():
					b.Fatal(ctx.Err())
				}
				<-s
			}
		})
	})
}
