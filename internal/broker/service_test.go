package broker_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// serve serves b, and gRPC health, on a free port of 127.0.0.1 until the
// test ends and returns a client of it and its connection.
func serve(t testing.TB, b *broker.Broker) (reservev1.ReserveClient, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reservev1.RegisterReserveServer(srv, broker.NewService(b))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return reservev1.NewReserveClient(conn), conn
}

func TestServiceOverGRPC(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, Margin: margin, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 1)
	c, _ := serve(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &reservev1.BorrowRequest{Gate: "g", Pod: "pod-a", Hold: durationpb.New(time.Second)}

	// Learning: a refusal that says for how long.
	resp, err := c.Borrow(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetRefusal(); r.GetReason() != reservev1.Reason_REASON_LEARNING || r.GetRetryAfter().AsDuration() != maxLease {
		t.Fatalf("while learning: %v, want REASON_LEARNING retrying after %s", resp, maxLease)
	}
	clock.SetTime(b.LearningUntil())

	resp, err = c.Borrow(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l := resp.GetLease()
	if l == nil || l.GetIncarnation() != b.Incarnation() || l.GetTtl().AsDuration() != time.Second+margin {
		t.Fatalf("borrow: %v, want a lease of hold + margin", resp)
	}
	resp, err = c.Borrow(ctx, req)
	if err != nil || resp.GetRefusal().GetReason() != reservev1.Reason_REASON_EXHAUSTED || resp.GetRefusal().GetRetryAfter() != nil {
		t.Fatalf("borrow with none free: %v, %v, want REASON_EXHAUSTED", resp, err)
	}

	// A waiting borrow whose caller's deadline comes first leaves nothing.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Borrow(short, &reservev1.BorrowRequest{Gate: "g", Pod: "pod-b", Hold: durationpb.New(time.Second), Wait: durationpb.New(time.Hour)})
	cancelShort()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a waiting borrow past its caller's deadline: %v, want DeadlineExceeded", err)
	}

	ret, err := c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()})
	if err != nil || !ret.GetReturned() {
		t.Fatalf("return: %v, %v", ret, err)
	}
	ret, err = c.Return(ctx, &reservev1.ReturnRequest{Gate: "g", Incarnation: l.GetIncarnation(), Id: l.GetId()})
	if err != nil || ret.GetReturned() {
		t.Errorf("second return: %v, %v, want returned false", ret, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s := stats(t, b); s.Leases != 0 || s.Waiting != 0; s = stats(t, b) {
		if time.Now().After(deadline) {
			t.Fatalf("after the return and the abandoned wait: %+v, want nothing lent or waiting", s)
		}
		time.Sleep(time.Millisecond)
	}

	_, err = c.Borrow(ctx, &reservev1.BorrowRequest{Gate: "g"})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "broker: invalid request: pod: must not be empty; hold: must be positive, got 0s" {
		t.Errorf("malformed borrow: %v, want InvalidArgument naming the fields", err)
	}
	resp, err = c.Borrow(ctx, &reservev1.BorrowRequest{Gate: "h", Pod: "p", Hold: durationpb.New(time.Second)})
	if err != nil || resp.GetRefusal().GetReason() != reservev1.Reason_REASON_UNKNOWN_GATE {
		t.Errorf("unknown gate: %v, %v", resp, err)
	}
}
