package grpcmw

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// rejection is what a client sees of a rejected call.
type rejection struct {
	Code      codes.Code
	ErrorInfo *errdetails.ErrorInfo
	// RetryDelay is RetryInfo's delay, rounded up to whole seconds so that
	// it can be compared; -1 without RetryInfo.
	RetryDelay time.Duration
}

func rejectionOf(err error) rejection {
	st := status.Convert(err)
	r := rejection{Code: st.Code(), RetryDelay: -1}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			r.ErrorInfo = d
		case *errdetails.RetryInfo:
			r.RetryDelay = d.GetRetryDelay().AsDuration()
			if r.RetryDelay%time.Second != 0 {
				r.RetryDelay = r.RetryDelay.Truncate(time.Second) + time.Second
			}
		}
	}
	return r
}

func errorInfo(reason, permits string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{
		Reason:   reason,
		Domain:   "backpressure.dev",
		Metadata: map[string]string{"gate": "ledger", "permits": permits},
	}
}

func TestServerRejects(t *testing.T) {
	tests := []struct {
		name   string
		limits gate.Limits
		// served calls complete before the probe; held ones stay in the
		// handler until it has been answered.
		served, held int
		// timeout, if set, is the probe's deadline.
		timeout   time.Duration
		closeGate bool
		want      rejection
	}{{
		name:   "rate limited, with RetryInfo up to the next token",
		limits: gate.Limits{Permits: 10, RatePerSecond: 1.0 / 30, Burst: 1},
		served: 1,
		want:   rejection{codes.ResourceExhausted, errorInfo("RATE_LIMITED", "10"), 30 * time.Second},
	}, {
		name:   "queue full",
		limits: gate.Limits{Permits: 1},
		held:   1,
		want:   rejection{codes.ResourceExhausted, errorInfo("QUEUE_FULL", "1"), -1},
	}, {
		name:   "wait timeout",
		limits: gate.Limits{Permits: 2, QueueCapacity: 1, MaxQueueWait: 20 * time.Millisecond},
		held:   2,
		want:   rejection{codes.ResourceExhausted, errorInfo("WAIT_TIMEOUT", "2"), -1},
	}, {
		name:    "deadline too short, from the client's deadline",
		limits:  gate.Limits{Permits: 1, TypicalLatency: time.Hour},
		timeout: 10 * time.Second,
		want:    rejection{codes.ResourceExhausted, errorInfo("DEADLINE_TOO_SHORT", "1"), -1},
	}, {
		name:      "closed",
		limits:    gate.Limits{Permits: 1},
		closeGate: true,
		want:      rejection{codes.ResourceExhausted, errorInfo("CLOSED", "1"), -1},
	}}
	probes := map[string]func(context.Context, *testing.T, *callers) error{
		"unary":  func(ctx context.Context, _ *testing.T, c *callers) error { return unary(ctx, c.client, behaveOK) },
		"stream": func(ctx context.Context, _ *testing.T, c *callers) error { return bidi(ctx, c.client, behaveOK) },
	}
	for _, tc := range tests {
		for kind, probe := range probes {
			t.Run(kind+": "+tc.name, func(t *testing.T) {
				g := gatetest.New(t, "ledger", tc.limits)
				c := newGatedServer(t, g)
				for range tc.served {
					if err := unary(context.Background(), c.client, behaveOK); err != nil {
						t.Fatalf("call before the probe: %v", err)
					}
				}
				var wg sync.WaitGroup
				for range tc.held {
					wg.Go(func() {
						if err := unary(context.Background(), c.client, behaveHold); err != nil {
							t.Errorf("held call: %v", err)
						}
					})
				}
				gatetest.WaitInFlight(t, g, tc.held)
				if tc.closeGate {
					g.Close()
				}
				ctx := context.Background()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				calls := c.svc.calls.Load()

				err := probe(ctx, t, c)
				close(c.svc.release)
				wg.Wait()
				if diff := cmp.Diff(tc.want, rejectionOf(err), protocmp.Transform()); diff != "" {
					t.Errorf("rejected call (-want +got):\n%s", diff)
				}
				if got := c.svc.calls.Load(); got != calls {
					t.Errorf("the service saw %d rejected calls: a rejected call must not reach it", got-calls)
				}
				gatetest.WaitInFlight(t, g, 0)
			})
		}
	}
}

// callers is a client of a server whose calls are gated.
type callers struct {
	svc       *service
	client    testServiceClient
	recoverer *recoverer
}

func newGatedServer(t *testing.T, g *gate.Gate) *callers {
	svc := newService()
	rec := newRecoverer(g)
	addr := serve(t, svc,
		grpc.ChainUnaryInterceptor(rec.unary, UnaryServerInterceptor(Fixed(g))),
		grpc.ChainStreamInterceptor(rec.stream, StreamServerInterceptor(Fixed(g))))
	return &callers{svc: svc, client: dial(t, addr), recoverer: rec}
}

func TestServerReleasesHoweverTheCallEnds(t *testing.T) {
	cancelSoon := func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(20*time.Millisecond, cancel)
		return ctx
	}
	expireSoon := func(ctx context.Context) context.Context {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		time.AfterFunc(time.Second, cancel)
		return ctx
	}
	tests := []struct {
		name      string
		call      func(context.Context, testServiceClient) error
		ctx       func(context.Context) context.Context
		want      codes.Code
		wantPanic bool
	}{
		{name: "unary returns", call: unaryDoing(behaveOK), want: codes.OK},
		{name: "unary fails", call: unaryDoing(behaveError), want: codes.Aborted},
		{name: "unary panics", call: unaryDoing(behavePanic), want: codes.Internal, wantPanic: true},
		{name: "unary cancelled by the client", call: unaryDoing(behaveHold), ctx: cancelSoon, want: codes.Canceled},
		{name: "unary past its deadline", call: unaryDoing(behaveHold), ctx: expireSoon, want: codes.DeadlineExceeded},
		{name: "stream ends", call: bidiDoing(behaveOK), want: codes.OK},
		{name: "stream fails", call: bidiDoing(behaveError), want: codes.Aborted},
		{name: "stream panics", call: bidiDoing(behavePanic), want: codes.Internal, wantPanic: true},
		{name: "stream cancelled by the client", call: bidiDoing(behaveHold), ctx: cancelSoon, want: codes.Canceled},
		{name: "stream abandoned after its first message", call: abandonedBidi, want: codes.Canceled},
	}
	// One permit and no waiting room: a call that kept its permit would
	// turn every later call into RESOURCE_EXHAUSTED.
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	c := newGatedServer(t, g)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx(ctx)
			}
			if got := status.Code(tc.call(ctx, c.client)); got != tc.want {
				t.Errorf("call ended with %v, want %v", got, tc.want)
			}
			if tc.wantPanic {
				// The recoverer outside the gate saw the handler's own panic,
				// with the permit already released.
				if diff := cmp.Diff(recovered{"boom", 0}, <-c.recoverer.panics); diff != "" {
					t.Errorf("panic seen outside the gate (-want +got):\n%s", diff)
				}
			}
			gatetest.WaitInFlight(t, g, 0)
		})
	}
	gatetest.AssertNoLeak(t, g)
}

func unaryDoing(behaviour string) func(context.Context, testServiceClient) error {
	return func(ctx context.Context, c testServiceClient) error { return unary(ctx, c, behaviour) }
}

func bidiDoing(behaviour string) func(context.Context, testServiceClient) error {
	return func(ctx context.Context, c testServiceClient) error { return bidi(ctx, c, behaviour) }
}

// abandonedBidi opens a stream, exchanges one message and cancels it.
func abandonedBidi(ctx context.Context, c testServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		cancel()
		return err
	}
	if err := stream.Send(newStreamRequest(behaveOK)); err != nil {
		cancel()
		return err
	}
	if _, err := stream.Recv(); err != nil {
		cancel()
		return err
	}
	cancel()
	_, err = stream.Recv()
	return err
}

// TestServerLimitsConcurrency runs unary calls and streams, some of them
// cancelled, against a gated server: its handlers never run more often at
// once than there are permits, every call ends with a result, a rejection or
// its client's cancellation, and no permit is left behind.
func TestServerLimitsConcurrency(t *testing.T) {
	const permits = 4
	g := gatetest.New(t, "ledger", gate.Limits{Permits: permits, QueueCapacity: 16, MaxQueueWait: 50 * time.Millisecond})
	c := newGatedServer(t, g)

	var mu sync.Mutex
	ends := map[codes.Code]int{}
	var wg sync.WaitGroup
	for i := range 32 {
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
				}
				var err error
				if rng.IntN(2) == 0 {
					err = unary(ctx, c.client, behaveSleep)
				} else {
					err = bidi(ctx, c.client, behaveSleep)
				}
				cancel()
				mu.Lock()
				ends[status.Code(err)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	if got := c.svc.running.Max(); got != permits {
		t.Errorf("most handlers running at once: got %d, want %d (the permits)", got, permits)
	}
	for code, n := range ends {
		switch code {
		case codes.OK, codes.ResourceExhausted, codes.Canceled, codes.DeadlineExceeded:
		default:
			t.Errorf("%d calls ended with %v", n, code)
		}
	}
	if ends[codes.OK] == 0 || ends[codes.ResourceExhausted] == 0 {
		t.Errorf("calls by result %v: the test needs both successes and rejections", ends)
	}
	t.Logf("calls by result: %v", ends)
	gatetest.AssertNoLeak(t, g)
}

func TestSelectorLeavesCallsUngated(t *testing.T) {
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 1})
	g.Close() // every gated call is rejected
	gateUnary := func(_ context.Context, method string) (*gate.Gate, bool) {
		if method == "/grpc.testing.TestService/UnaryCall" {
			return g, true
		}
		return nil, false
	}
	svc := newService()
	addr := serve(t, svc,
		grpc.UnaryInterceptor(UnaryServerInterceptor(gateUnary)),
		grpc.StreamInterceptor(StreamServerInterceptor(gateUnary)))
	client := dial(t, addr)

	if err := unary(context.Background(), client, behaveOK); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gated method: got %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := bidi(context.Background(), client, behaveOK); err != nil {
		t.Errorf("ungated method: %v", err)
	}
	if got := svc.calls.Load(); got != 1 {
		t.Errorf("service calls: got %d, want 1", got)
	}
}

func TestRejectionErrorText(t *testing.T) {
	g := gatetest.New(t, "ledger", gate.Limits{Permits: 3})
	err := admissionError(g, &gate.Rejection{Reason: gate.QueueFull, Gate: "ledger"})
	want := `rpc error: code = ResourceExhausted desc = gate "ledger": queue full`
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{context.Canceled, codes.Canceled},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
	} {
		if got := status.Code(admissionError(g, tc.err)); got != tc.want {
			t.Errorf("admissionError(%v): got %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A Selector that gates a call with a nil gate is a programming error: the
// interceptor panics rather than let the call through ungated.
func TestSelectorWithANilGatePanics(t *testing.T) {
	sel := func(context.Context, string) (*gate.Gate, bool) { return nil, true }
	called := false
	func() {
		defer func() {
			if r := recover(); r != "grpcmw: Selector gated /svc/M with a nil gate" {
				t.Errorf("recovered %v, want the nil gate's panic", r)
			}
		}()
		_, _ = UnaryServerInterceptor(sel)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"},
			func(context.Context, any) (any, error) { called = true; return nil, nil })
	}()
	if called {
		t.Error("the handler ran ungated")
	}
}

func TestFixedWithoutGatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Fixed(nil) did not panic")
		}
	}()
	Fixed(nil)
}
