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
// path with its permit free (via=local); and a borrow from a gate whose
// reserve holds nothing, served by another pod's offered permit, a second
// round trip from the server to that pod's stream and back (via=offer).
// p50 and p99 of each Acquire are reported as metrics; the Release of a
// lent permit returns it in the background and is not timed apart.
func BenchmarkGateBorrow(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// --offer-ask-timeout well above a round trip: a slow ask is then
	// measured rather than refused.
	s, stop, done := serveInProcess(ctx, b, "--capacity", "g=1000000", "--capacity", "o=0", "--offer-ask-timeout", "10ms", "--max-lease", "200ms", "--lease-margin", "10ms",
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
	b.Run("via=offer", func(b *testing.B) {
		donor, err := gate.New("o", gate.Limits{Permits: 1_000_000})
		if err != nil {
			b.Fatal(err)
		}
		offers, err := reserve.New(conn, reserve.Options{Pod: "donor"})
		if err != nil {
			b.Fatal(err)
		}
		offerCtx, stopOffer := context.WithCancel(ctx)
		defer stopOffer()
		go func() { _ = offers.Offer(offerCtx, "o", gateOfferer{donor}) }()
		g, err := gate.New("o", limits)
		if err != nil {
			b.Fatal(err)
		}
		g.SetLender(client.Lender("o"))
		held, err := g.TryAcquire(ctx)
		if err != nil {
			b.Fatalf("taking the gate's one permit: %v", err)
		}
		defer held.Release()
		// The server lends the donor's permits once its stream has told
		// it what the donor can spare.
		for deadline := time.Now().Add(5 * time.Second); ; {
			if loan, err := client.Lender("o").Lend(ctx, 100*time.Millisecond, 0); err == nil {
				loan.Return()
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the donor's offer did not reach the server within 5s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		run(b, g, true)
		if donor.Stats().LentOut == 0 {
			b.Fatal("the donor lent nothing")
		}
	})
}

// gateOfferer offers a whole gate's free permits, as the Runtime's Offerer
// does for a plan in force that keeps none.
type gateOfferer struct{ g *gate.Gate }

func (o gateOfferer) Lend(time.Duration) (func(), bool) {
	p, ok := o.g.LendOut(0)
	if !ok {
		return nil, false
	}
	return p.ReleaseFunc(), true
}

func (o gateOfferer) Spare() int { return o.g.Spare(0) }
