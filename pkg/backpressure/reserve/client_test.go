package reserve_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// server is a permit server a test scripts: it lends while it has permits,
// else answers with refusal (EXHAUSTED when nil), after delay.
type server struct {
	reservev1.UnimplementedReserveServer
	mu       sync.Mutex
	permits  int
	refusal  *reservev1.Refusal
	delay    time.Duration
	asked    atomic.Int64
	returned atomic.Int64
	last     *reservev1.BorrowRequest
	// tickets are the borrows' tickets, in order; withdrawn the tickets
	// of the Returns that named one.
	tickets, withdrawn []uint64
}

func (s *server) Borrow(ctx context.Context, req *reservev1.BorrowRequest) (*reservev1.BorrowResponse, error) {
	s.asked.Add(1)
	s.mu.Lock()
	delay := s.delay
	s.last = req
	s.tickets = append(s.tickets, req.GetTicket())
	s.mu.Unlock()
	select {
	case <-time.After(delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusal != nil {
		return &reservev1.BorrowResponse{Outcome: &reservev1.BorrowResponse_Refusal{Refusal: s.refusal}}, nil
	}
	if s.permits == 0 {
		return &reservev1.BorrowResponse{Outcome: &reservev1.BorrowResponse_Refusal{Refusal: &reservev1.Refusal{Reason: reservev1.Reason_REASON_EXHAUSTED}}}, nil
	}
	s.permits--
	return &reservev1.BorrowResponse{Outcome: &reservev1.BorrowResponse_Lease{Lease: &reservev1.Lease{Incarnation: 7, Id: uint64(s.asked.Load()), Ttl: req.GetHold()}}}, nil
}

func (s *server) Return(_ context.Context, req *reservev1.ReturnRequest) (*reservev1.ReturnResponse, error) {
	s.mu.Lock()
	if req.GetId() == 0 {
		s.withdrawn = append(s.withdrawn, req.GetTicket())
		s.mu.Unlock()
		return &reservev1.ReturnResponse{}, nil
	}
	s.permits++
	s.mu.Unlock()
	s.returned.Add(1)
	return &reservev1.ReturnResponse{Returned: true}, nil
}

func (s *server) set(f func(*server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// start serves s on a free port of 127.0.0.1 until the test ends, and
// returns a Client of it.
func start(t *testing.T, s *server, opts reserve.Options) *reserve.Client {
	t.Helper()
	return client(t, serve(t, s), opts)
}

// serve serves s on a free port of 127.0.0.1 until the test ends, and
// returns its address.
func serve(t *testing.T, s *server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reservev1.RegisterReserveServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func client(t *testing.T, addr string, opts reserve.Options) *reserve.Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if opts.Pod == "" {
		opts.Pod = "pod-a"
	}
	if opts.Budget == 0 {
		opts.Budget = 2 * time.Second // a loaded test machine must not make a fast server slow
	}
	c, err := reserve.New(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestLendAndReturn(t *testing.T) {
	s := &server{permits: 1}
	c := start(t, s, reserve.Options{Pod: "pod-a"})
	l := c.Lender("logistics")
	loan, err := l.Lend(context.Background(), 300*time.Millisecond, 40*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if req := s.last; req.GetGate() != "logistics" || req.GetPod() != "pod-a" || req.GetHold().AsDuration() != 300*time.Millisecond || req.GetWait().AsDuration() != 40*time.Millisecond {
		t.Errorf("the server was asked %v", req)
	}
	_, err = l.Lend(context.Background(), time.Second, 0)
	var refusal *reserve.Refusal
	if !errors.Is(err, gate.ErrNotLent) || !errors.As(err, &refusal) || refusal.Reason != reservev1.Reason_REASON_EXHAUSTED {
		t.Errorf("with nothing left to lend: %v, want a refusal matching gate.ErrNotLent", err)
	}
	loan.Return()
	eventually(t, "the return reaches the server", func() bool { return s.returned.Load() == 1 })
}

// TestQuietAfterRefusals: after a learning server's refusal the Lender
// does not ask again for the time it said; after an unknown gate, for a
// while.
func TestQuietAfterRefusals(t *testing.T) {
	s := &server{refusal: &reservev1.Refusal{Reason: reservev1.Reason_REASON_LEARNING, RetryAfter: durationpb.New(300 * time.Millisecond)}}
	c := start(t, s, reserve.Options{})
	l := c.Lender("g")
	if _, err := l.Lend(context.Background(), time.Second, 0); !errors.Is(err, gate.ErrNotLent) {
		t.Fatalf("learning: %v, want not lent", err)
	}
	if _, err := l.Lend(context.Background(), time.Second, 0); !errors.Is(err, gate.ErrNotLent) {
		t.Errorf("while the server learns: %v, want not lent", err)
	}
	if s.asked.Load() != 1 {
		t.Errorf("the server was asked %d times while learning, want once", s.asked.Load())
	}
	if _, err := c.Lender("other").Lend(context.Background(), time.Second, 0); !errors.Is(err, gate.ErrNotLent) || s.asked.Load() != 2 {
		t.Errorf("another gate is asked as usual: %v, %d asks", err, s.asked.Load())
	}
	s.set(func(s *server) { s.refusal, s.permits = nil, 1 })
	eventually(t, "the server is asked again once it has learned", func() bool {
		_, err := l.Lend(context.Background(), time.Second, 0)
		return err == nil
	})
}

// TestBudget: a server slower than the budget is not waited for.
func TestBudget(t *testing.T) {
	s := &server{permits: 1, delay: 5 * time.Second}
	c := start(t, s, reserve.Options{Budget: 20 * time.Millisecond})
	start := time.Now()
	_, err := c.Lender("g").Lend(context.Background(), time.Second, 0)
	if err == nil || errors.Is(err, gate.ErrNotLent) {
		t.Errorf("a server slower than the budget: %v, want a failure", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the borrow took %s against a server that answers in 5s and a budget of 20ms", took)
	}
}

// TestTickets: every borrow carries a ticket of its own; one given up on
// (the budget ran out, or the call went on without it) is taken back by
// its ticket, since a lease may have been granted meanwhile; one answered
// in time is not.
func TestTickets(t *testing.T) {
	s := &server{permits: 1}
	c := start(t, s, reserve.Options{Budget: 20 * time.Millisecond})
	l := c.Lender("g")
	loan, err := l.Lend(context.Background(), time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lend(context.Background(), time.Second, 0); !errors.Is(err, gate.ErrNotLent) {
		t.Fatalf("with nothing to lend: %v, want a refusal", err)
	}
	loan.Return()
	s.set(func(s *server) { s.delay = 5 * time.Second })
	if _, err := l.Lend(context.Background(), time.Second, 0); err == nil || errors.Is(err, gate.ErrNotLent) {
		t.Fatalf("a server slower than the budget: %v, want a failure", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	if _, err := l.Lend(ctx, time.Second, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("a borrow whose call went on without it: %v, want context.Canceled", err)
	}
	eventually(t, "both borrows given up on are taken back", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.withdrawn) == 2
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tickets) != 4 {
		t.Fatalf("tickets %v: want 4 borrows", s.tickets)
	}
	seen := map[uint64]bool{}
	for _, ticket := range s.tickets {
		if ticket == 0 || seen[ticket] {
			t.Errorf("tickets %v: want each borrow's its own, none 0", s.tickets)
		}
		seen[ticket] = true
	}
	if want := []uint64{s.tickets[2], s.tickets[3]}; !slices.Equal(slices.Sorted(slices.Values(s.withdrawn)), slices.Sorted(slices.Values(want))) {
		t.Errorf("withdrawn %v, want the last two borrows' tickets %v", s.withdrawn, want)
	}
}

// TestUnreachable: with no server, a borrow fails, and the Lender does not
// ask again for Backoff.
func TestUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c := client(t, addr, reserve.Options{Backoff: time.Hour})
	l := c.Lender("g")
	_, err = l.Lend(context.Background(), time.Second, 0)
	if err == nil || errors.Is(err, gate.ErrNotLent) {
		t.Fatalf("unreachable: %v, want a failure", err)
	}
	start := time.Now()
	if _, err := l.Lend(context.Background(), time.Second, 0); err == nil || time.Since(start) > time.Second {
		t.Errorf("the second borrow: %v after %s, want an at-once failure while backing off", err, time.Since(start))
	}
}

// TestGateBorrows: a gate with the Client's Lender borrows from the server
// when its own permit is taken, and the permit goes back when the call
// ends.
func TestGateBorrows(t *testing.T) {
	s := &server{permits: 1}
	c := start(t, s, reserve.Options{})
	g, err := gate.New("g", gate.Limits{Permits: 1})
	if err != nil {
		t.Fatal(err)
	}
	g.SetLender(c.Lender("g"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	own, err := g.Acquire(ctx)
	if err != nil || own.Borrowed() {
		t.Fatalf("the gate's own permit: %v", err)
	}
	lent, err := g.Acquire(ctx)
	if err != nil || !lent.Borrowed() {
		t.Fatalf("with the own permit taken: %v (borrowed %v), want a lent permit", err, lent.Borrowed())
	}
	_, err = g.Acquire(ctx)
	var r *gate.Rejection
	if !errors.As(err, &r) || r.Reason != gate.QueueFull {
		t.Errorf("with the reserve empty too: %v, want QueueFull", err)
	}
	lent.Release()
	own.Release()
	eventually(t, "the lent permit is back", func() bool { return s.returned.Load() == 1 })
	if st := g.Stats(); st.Borrowed != 1 || st.NotLent != 1 || st.Admitted != 1 {
		t.Errorf("gate stats: borrowed %d, not lent %d, admitted %d", st.Borrowed, st.NotLent, st.Admitted)
	}
}

func TestOptions(t *testing.T) {
	if _, err := reserve.New(nil, reserve.Options{}); err == nil {
		t.Error("no pod: no error")
	}
	if _, err := reserve.New(nil, reserve.Options{Pod: "p", Budget: -1}); err == nil {
		t.Error("negative budget: no error")
	}
	if _, err := reserve.New(nil, reserve.Options{Pod: "p", SpareInterval: -1}); err == nil || !strings.Contains(err.Error(), "SpareInterval") {
		t.Errorf("negative spare interval: %v, want an error naming SpareInterval", err)
	}
}
