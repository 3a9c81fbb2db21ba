package main

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// TestAGrantTheBorrowerGaveUpOnIsTakenBack: the server lends, but its
// answer reaches the library's client after the client's budget (a busy
// node, a slow network), so the call went on without it. Without tickets
// the lease would keep the reserve's only permit from every pod for the
// call's whole hold (here 5s, and the server's clock does not move); the
// client takes the borrow back by its ticket, and the next borrow is lent
// at once. Real gRPC on 127.0.0.1, the permit server's Broker and Service
// and the library's client.
func TestAGrantTheBorrowerGaveUpOnIsTakenBack(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b, err := broker.New(broker.Options{MaxLease: 10 * time.Second, Margin: 100 * time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 1)
	clock.SetTime(b.LearningUntil())

	// slow holds back the answers to borrows while set: the lease is
	// granted, and its answer arrives after the client gave up.
	var slow atomic.Bool
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == reservev1.Reserve_Borrow_FullMethodName && slow.Load() {
			time.Sleep(200 * time.Millisecond)
		}
		return resp, err
	}))
	reservev1.RegisterReserveServer(srv, broker.NewService(b))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c, err := reserve.New(dial(t, lis.Addr().String()), reserve.Options{Pod: "pod-a", Budget: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lender := c.Lender("g")

	slow.Store(true)
	_, err = lender.Lend(context.Background(), 5*time.Second, 0)
	if err == nil || errors.Is(err, gate.ErrNotLent) {
		t.Fatalf("a borrow answered after the budget: %v, want a failure", err)
	}
	stats := func() broker.GateStats { return b.Stats()[0] }
	deadline := time.Now().Add(2 * time.Second)
	for s := stats(); s.Leases != 0; s = stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v 2s after the client gave up: the lease it never saw still holds the reserve's permit", s)
		}
		time.Sleep(time.Millisecond)
	}
	slow.Store(false)
	loan, err := lender.Lend(context.Background(), 5*time.Second, 0)
	if err != nil {
		t.Fatalf("the next borrow: %v, want the permit taken back", err)
	}
	loan.Return()
	if s := stats(); s.Expired != 0 {
		t.Errorf("stats %+v: no lease may have expired", s)
	}
}
