package main

import (
	"context"
	"slices"
	"testing"
	"time"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// BenchmarkGateBorrow is what borrowing adds to a call, end to end: a
// gate of 1 permit whose permit is taken, set to borrow from this server
// (in-process, gRPC on loopback) through the library's client, acquires
// and releases a lent permit (via=borrow); beside it the same gate's local
// path with its permit free (via=local). p50 and p99 of each Acquire are
// reported as metrics; the Release of a lent permit returns it in the
// background and is not timed apart.
func BenchmarkGateBorrow(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, stop, done := serveInProcess(ctx, b, "--capacity", "g=1000000", "--max-lease", "200ms", "--lease-margin", "10ms",
		"--listen-address", "127.0.0.1:0", "--metrics-listen", "")
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Errorf("run: %v", err)
		}
	}()
	conn := dial(b, s.addr())
	borrowAfterLearning(ctx, b, reservev1.NewReserveClient(conn))
	client, err := reserve.New(conn, reserve.Options{Pod: "bench", Budget: 50 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	// No waiting room: a call that finds the permit taken borrows at once.
	limits := gate.Limits{Permits: 1, AcquireTimeout: 100 * time.Millisecond}

	run := func(b *testing.B, g *gate.Gate, borrowed bool) {
		samples := make([]time.Duration, 0, b.N)
		before := g.Stats().Borrowed
		for b.Loop() {
			// A call's deadline bounds its lease (the server's longest
			// is 200ms).
			callCtx, cancelCall := context.WithTimeout(ctx, 100*time.Millisecond)
			start := time.Now()
			p, err := g.Acquire(callCtx)
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
			cancelCall()
		}
		if lent := g.Stats().Borrowed - before; borrowed != (lent > 0) {
			b.Fatalf("%d permits borrowed, want borrowing %v", lent, borrowed)
		}
		slices.Sort(samples)
		at := func(q float64) float64 {
			return float64(samples[min(len(samples)-1, int(q*float64(len(samples))))].Nanoseconds()) / 1e3
		}
		b.ReportMetric(at(0.50), "p50-µs")
		b.ReportMetric(at(0.99), "p99-µs")
	}
	b.Run("via=local", func(b *testing.B) {
		g, err := gate.New("g", limits)
		if err != nil {
			b.Fatal(err)
		}
		g.SetLender(client.Lender("g"))
		run(b, g, false)
	})
	b.Run("via=borrow", func(b *testing.B) {
		g, err := gate.New("g", limits)
		if err != nil {
			b.Fatal(err)
		}
		g.SetLender(client.Lender("g"))
		held, err := g.TryAcquire(ctx)
		if err != nil {
			b.Fatalf("taking the gate's one permit: %v", err)
		}
		defer held.Release()
		run(b, g, true)
	})
}
