package gate_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
)

// benchLimits is a realistic share: no rate (the common outbound case), a
// waiting room, and a typical latency, so the fast path pays for its
// deadline check.
func benchLimits(permits int) gate.Limits {
	return gate.Limits{
		Permits:        permits,
		QueueCapacity:  permits,
		MaxQueueWait:   100 * time.Millisecond,
		AcquireTimeout: 100 * time.Millisecond,
		TypicalLatency: 200 * time.Millisecond,
	}
}

func newBenchGate(b *testing.B, permits int) *gate.Gate {
	b.Helper()
	g, err := gate.New("bench", benchLimits(permits))
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// BenchmarkAcquireRelease measures one uncontended Acquire and Release.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	const permits = 64
	b.Run("gate", func(b *testing.B) {
		g := newBenchGate(b, permits)
		b.ReportAllocs()
		for b.Loop() {
			p, err := g.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Release()
		}
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

// BenchmarkAcquireReleaseParallel measures Acquire and Release from every
// processor at once, with enough permits that nobody waits.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	ctx := context.Background()
	permits := 64 * max(1, runtime.GOMAXPROCS(0))
	b.Run("gate", func(b *testing.B) {
		g := newBenchGate(b, permits)
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
