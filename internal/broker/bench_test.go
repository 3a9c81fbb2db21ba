package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// lendingBroker is a Broker past learning with a capacity no benchmark
// exhausts.
func lendingBroker(b *testing.B) *broker.Broker {
	b.Helper()
	clock := clocktesting.NewFakePassiveClock(t0)
	br, err := broker.New(broker.Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	_ = br.SetCapacity("g", 1<<30)
	clock.SetTime(br.LearningUntil())
	return br
}

// reportPercentiles adds the p50 and p99 of the samples as metrics.
func reportPercentiles(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[min(len(samples)-1, int(q*float64(len(samples))))].Microseconds())
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkBorrowLatency is what one borrow adds to a call whose pod's
// share is full: the Borrow round trip over gRPC on loopback (its p50 and
// p99 as metrics), beside the peer, an empty gRPC call (the health check)
// on the same connection. The Return that follows each borrow is not
// timed: the call does not wait for it.
func BenchmarkBorrowLatency(b *testing.B) {
	br := lendingBroker(b)
	c, conn := serve(b, br)
	b.Run("via=health", func(b *testing.B) {
		h := healthpb.NewHealthClient(conn)
		ctx := context.Background()
		samples := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		reportPercentiles(b, samples)
	})
	b.Run("via=borrow", func(b *testing.B) {
		ctx := context.Background()
		req := &reservev1.BorrowRequest{Gate: "g", Pod: "pod", Hold: durationpb.New(time.Second)}
		samples := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			resp, err := c.Borrow(ctx, req)
			samples = append(samples, time.Since(start))
			l := resp.GetLease()
			if err != nil || l == nil {
				b.Fatal(resp, err)
			}
			if _, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()}); err != nil {
				b.Fatal(err)
			}
		}
		reportPercentiles(b, samples)
	})
}

// BenchmarkServerThroughput is the borrows per second one server answers
// (each a Borrow and its Return over gRPC on loopback, from 64 concurrent
// borrowers), beside the Broker's own cost without gRPC. Run it with
// -cpu 2: the clients share the two cores with the server.
func BenchmarkServerThroughput(b *testing.B) {
	b.Run("via=grpc", func(b *testing.B) {
		c, _ := serve(b, lendingBroker(b))
		req := &reservev1.BorrowRequest{Gate: "g", Pod: "pod", Hold: durationpb.New(time.Second)}
		b.SetParallelism(32)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				resp, err := c.Borrow(ctx, req)
				l := resp.GetLease()
				if err != nil || l == nil {
					b.Error(resp, err)
					return
				}
				if _, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "borrows/s")
	})
	b.Run("via=inprocess", func(b *testing.B) {
		br := lendingBroker(b)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				l, err := br.Borrow(ctx, broker.Request{Gate: "g", Pod: "pod", Hold: time.Second})
				if err != nil {
					b.Error(err)
					return
				}
				br.Return("g", l.Incarnation, l.ID)
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "borrows/s")
	})
}
