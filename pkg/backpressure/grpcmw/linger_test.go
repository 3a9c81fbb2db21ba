package grpcmw

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// TestClientUnaryHoldsThePermitUntilTheAnswer has a caller leave a unary
// call the downstream is still working on: the caller gets its context's
// error at once, and the permit stays held, as httpmw.Transport holds it,
// until the downstream answers; the downstream never saw a cancellation.
func TestClientUnaryHoldsThePermitUntilTheAnswer(t *testing.T) {
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	svc, client := gatedClient(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { left <- unary(ctx, client, behaveHold) }()
	gatetest.WaitInFlight(t, g, 1)
	waitRunning(t, svc, 1)
	cancel()
	select {
	case err := <-left:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("the caller that left got %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller that left was kept waiting")
	}
	time.Sleep(100 * time.Millisecond)
	if n := g.InFlight(); n != 1 {
		t.Fatalf("%d permits held after the caller left, want 1 until the downstream answers", n)
	}
	if n := svc.running.Now(); n != 1 {
		t.Fatalf("the downstream runs %d calls, want the abandoned one still running", n)
	}
	close(svc.release)
	gatetest.WaitInFlight(t, g, 0)
}

// TestClientUnaryLingersNoLongerThanAsked cancels an abandoned call the
// downstream does not answer once the linger has passed, and releases its
// permit.
func TestClientUnaryLingersNoLongerThanAsked(t *testing.T) {
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	svc := newService()
	client := dial(t, serve(t, svc), grpc.WithUnaryInterceptor(UnaryClientInterceptor(Fixed(g), WithLinger(func() time.Duration { return 200 * time.Millisecond }))))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := unary(ctx, client, behaveHold); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	gatetest.WaitInFlight(t, g, 0)
	if held := time.Since(start); held < 250*time.Millisecond {
		t.Errorf("the permit was released %v after the call began, want after its deadline and the linger (250ms)", held)
	}
	waitRunning(t, svc, 0)
}

// waitRunning waits until the service runs n calls.
func waitRunning(t *testing.T, svc *service, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for svc.running.Now() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the service runs %d calls, want %d", svc.running.Now(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
