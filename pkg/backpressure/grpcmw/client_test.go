package grpcmw

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// gatedClient returns a client whose calls g gates, of a server that does
// not gate them.
func gatedClient(t *testing.T, g *gate.Gate) (*service, testServiceClient) {
	svc := newService()
	addr := serve(t, svc)
	return svc, dial(t, addr,
		grpc.WithUnaryInterceptor(UnaryClientInterceptor(Fixed(g))),
		grpc.WithStreamInterceptor(StreamClientInterceptor(Fixed(g))))
}

func TestClientRejectsLocally(t *testing.T) {
	calls := map[string]func(context.Context, testServiceClient) error{
		"unary": unaryDoing(behaveOK),
		// The stream is refused when it is opened, before anything is sent.
		"stream": func(ctx context.Context, c testServiceClient) error {
			_, err := c.FullDuplexCall(ctx)
			return err
		},
	}
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			g := gatetest.New(t, "ledger", gate.Limits{Permits: 10, RatePerSecond: 1.0 / 60, Burst: 1})
			svc, client := gatedClient(t, g)
			if err := bidi(context.Background(), client, behaveOK); err != nil {
				t.Fatalf("first call: %v", err)
			}

			err := call(context.Background(), client)
			want := rejection{codes.ResourceExhausted, errorInfo("RATE_LIMITED", "10"), time.Minute}
			if diff := cmp.Diff(want, rejectionOf(err), protocmp.Transform()); diff != "" {
				t.Errorf("rejected call (-want +got):\n%s", diff)
			}
			rej, ok := errors.AsType[*gate.Rejection](err)
			if !ok || rej.Reason != gate.RateLimited || rej.Gate != "ledger" {
				t.Errorf("errors.As: got %+v, %v; want the gate's rate-limited rejection", rej, ok)
			}
			if !errors.Is(err, gate.ErrRateLimited) {
				t.Errorf("errors.Is(%v, gate.ErrRateLimited) = false", err)
			}
			var local interface{ LocalRejection() bool }
			if !errors.As(err, &local) || !local.LocalRejection() {
				t.Error("a retry helper would not see that the rejection is local")
			}
			if got := svc.calls.Load(); got != 1 {
				t.Errorf("the server saw %d calls, want 1: a rejected call must not be sent", got)
			}
			gatetest.WaitInFlight(t, g, 0)
		})
	}
}

func TestClientDownstreamResourceExhaustedIsNotLocal(t *testing.T) {
	// The downstream's own rejection passes through the client unchanged:
	// it does not unwrap to a *gate.Rejection, so it is not taken for local.
	serverGate := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	serverGate.Close()
	svc := newService()
	addr := serve(t, svc, grpc.UnaryInterceptor(UnaryServerInterceptor(Fixed(serverGate))))
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	client := dial(t, addr, grpc.WithUnaryInterceptor(UnaryClientInterceptor(Fixed(g))))

	err := unary(context.Background(), client, behaveOK)
	if diff := cmp.Diff(rejection{codes.ResourceExhausted, errorInfo("CLOSED", "1"), -1}, rejectionOf(err), protocmp.Transform()); diff != "" {
		t.Errorf("downstream rejection (-want +got):\n%s", diff)
	}
	if errors.Is(err, gate.ErrRejected) {
		t.Errorf("the downstream's rejection %v is taken for a local one", err)
	}
	gatetest.AssertNoLeak(t, g)
}

func TestClientStreamHoldsThePermitUntilItEnds(t *testing.T) {
	tests := []struct {
		name string
		// run opens a stream and ends it; before it ends, it calls
		// midway, where the stream must hold the permit.
		run func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error
		// async: the permit is released by the context's callback, a
		// moment after run returns.
		async bool
	}{{
		name: "server streaming, read to io.EOF",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			stream, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{
				ResponseParameters: []*testpb.ResponseParameters{{}, {}, {}},
			})
			if err != nil {
				return err
			}
			for n := 0; ; n++ {
				if n == 2 {
					midway()
				}
				if _, err := stream.Recv(); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
			}
		},
	}, {
		name: "client streaming, closed and received",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			stream, err := c.StreamingInputCall(ctx)
			if err != nil {
				return err
			}
			for range 2 {
				if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: payload("abc")}); err != nil {
					return err
				}
			}
			midway()
			resp, err := stream.CloseAndRecv()
			if err == nil && resp.GetAggregatedPayloadSize() != 6 {
				t.Errorf("aggregated size %d, want 6", resp.GetAggregatedPayloadSize())
			}
			return err
		},
	}, {
		name: "bidi, closed and read to io.EOF",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			stream, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			if err := stream.Send(newStreamRequest(behaveOK)); err != nil {
				return err
			}
			if _, err := stream.Recv(); err != nil {
				return err
			}
			midway()
			if err := stream.CloseSend(); err != nil {
				return err
			}
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		},
	}, {
		name: "bidi, ended by the server's error",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			stream, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			midway()
			if err := stream.Send(newStreamRequest(behaveError)); err != nil {
				return err
			}
			if _, err := stream.Recv(); status.Code(err) != codes.Aborted {
				t.Errorf("Recv: got %v, want the server's ABORTED", err)
			}
			return nil
		},
	}, {
		name: "bidi, SendMsg fails once the server has ended the stream",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			stream, err := c.FullDuplexCall(ctx)
			if err != nil {
				return err
			}
			midway()
			for range 10000 {
				if err := stream.Send(newStreamRequest(behaveEnd)); errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				time.Sleep(100 * time.Microsecond)
			}
			t.Error("SendMsg never saw the end of the stream")
			return nil
		},
	}, {
		name: "bidi, cancelled without reading",
		run: func(ctx context.Context, t *testing.T, c testServiceClient, midway func()) error {
			ctx, cancel := context.WithCancel(ctx)
			stream, err := c.FullDuplexCall(ctx)
			if err != nil {
				cancel()
				return err
			}
			if err := stream.Send(newStreamRequest(behaveHold)); err != nil {
				cancel()
				return err
			}
			midway()
			cancel()
			return nil
		},
		async: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
			_, client := gatedClient(t, g)
			midway := func() {
				if got := g.Stats().InFlight; got != 1 {
					t.Errorf("in flight while the stream is open: got %d, want 1", got)
				}
			}
			if err := tc.run(context.Background(), t, client, midway); err != nil {
				t.Fatal(err)
			}
			if !tc.async {
				if got := g.Stats().InFlight; got != 0 {
					t.Errorf("in flight once the stream has ended: got %d, want 0", got)
				}
			}
			gatetest.AssertNoLeak(t, g)
		})
	}
}

func TestClientStreamThatFailsToStartReleases(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close() // nothing listens there any more
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	client := dial(t, addr, grpc.WithStreamInterceptor(StreamClientInterceptor(Fixed(g))))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := client.FullDuplexCall(ctx); status.Code(err) != codes.Unavailable {
			t.Fatalf("opening a stream to a closed port: got %v, want UNAVAILABLE", err)
		}
		if got := g.Stats().InFlight; got != 0 {
			t.Fatalf("in flight after the stream failed to start: got %d, want 0", got)
		}
	}
	gatetest.AssertNoLeak(t, g)
}

// TestClientLimitsConcurrency runs unary calls and streams, each to its end,
// through gated clients: the server never sees more calls at once than the
// gate has permits, and sees that many.
func TestClientLimitsConcurrency(t *testing.T) {
	const permits = 3
	g := gatetest.New(t, "ledger", gate.Limits{Permits: permits, QueueCapacity: 64})
	svc, client := gatedClient(t, g)
	var wg sync.WaitGroup
	for i := range 32 {
		call := []func(context.Context, testServiceClient, string) error{unary, bidi}[i%2]
		wg.Go(func() {
			// A leaked permit would leave callers queued for good: bound
			// them so that the test fails instead of hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for range 10 {
				if err := call(ctx, client, behaveSleep); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := svc.running.Max(); got != permits {
		t.Errorf("most calls running at once on the server: got %d, want %d (the permits)", got, permits)
	}
	gatetest.AssertNoLeak(t, g)
}

// TestClientLeaksNoPermit runs unary calls and streams through gated
// clients that give up while queued, cancel streams midway, abandon them
// unread or read them to the end: every permit comes back exactly once.
func TestClientLeaksNoPermit(t *testing.T) {
	const permits = 3
	g := gatetest.New(t, "ledger", gate.Limits{Permits: permits, QueueCapacity: 64})
	_, client := gatedClient(t, g)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ends := map[codes.Code]int{}
	for i := range 32 {
		rng := rand.New(rand.NewPCG(uint64(i), 4))
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(30))*time.Millisecond)
				var err error
				switch rng.IntN(3) {
				case 0:
					err = unary(ctx, client, behaveSleep)
				case 1:
					err = bidi(ctx, client, behaveSleep)
				case 2: // opened, one message sent, then left to its context
					var stream testpb.TestService_FullDuplexCallClient
					if stream, err = client.FullDuplexCall(ctx); err == nil {
						err = stream.Send(newStreamRequest(behaveHold))
					}
				}
				cancel()
				mu.Lock()
				ends[status.Code(err)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("calls by result: %v", ends)
	if ends[codes.OK] == 0 || ends[codes.DeadlineExceeded] == 0 {
		t.Errorf("calls by result %v: the test needs both successes and calls that gave up", ends)
	}
	gatetest.AssertNoLeak(t, g)
}
