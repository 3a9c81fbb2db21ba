package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// offerServer is the server's side of Offer streams a test scripts: each
// stream it accepts goes to conns (or to handle, when set) with its first
// message.
type offerServer struct {
	reservev1.UnimplementedReserveServer
	conns chan *offerConn
	// handle, when set, serves each accepted stream instead of the test.
	handle func(*offerConn) error
	// refuse is how many streams to refuse with NotFound (an unknown
	// gate) before accepting one.
	refuse atomic.Int32

	mu sync.Mutex
	// opened are the times streams were opened, refused ones included.
	opened []time.Time
}

// offerConn is one accepted stream.
type offerConn struct {
	first  *reservev1.OfferMessage
	stream reservev1.Reserve_OfferServer
	// msgs are the pod's messages after the first; closed when the
	// stream breaks.
	msgs chan *reservev1.OfferMessage
	// end ends the stream with the error sent.
	end chan error
}

func newOfferServer() *offerServer {
	return &offerServer{conns: make(chan *offerConn, 64)}
}

func (s *offerServer) Offer(stream reservev1.Reserve_OfferServer) error {
	s.mu.Lock()
	s.opened = append(s.opened, time.Now())
	s.mu.Unlock()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if s.refuse.Add(-1) >= 0 {
		return status.Error(codes.NotFound, "no reserve for gate "+first.GetGate())
	}
	c := &offerConn{first: first, stream: stream, msgs: make(chan *reservev1.OfferMessage, 1024), end: make(chan error, 1)}
	go func() {
		defer close(c.msgs)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case c.msgs <- m:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	if s.handle != nil {
		return s.handle(c)
	}
	s.conns <- c
	select {
	case err := <-c.end:
		return err
	case <-stream.Context().Done():
		return nil
	}
}

// accept waits for the next stream the pod opens.
func (s *offerServer) accept(t *testing.T) *offerConn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no Offer stream opened within 10s")
		return nil
	}
}

// next is the pod's next message.
func (c *offerConn) next(t *testing.T) *reservev1.OfferMessage {
	t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			t.Fatal("the Offer stream broke")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message from the pod within 10s")
		return nil
	}
}

// ask asks the pod for a permit for ttl and returns its answer, skipping
// the spare's updates before it.
func (c *offerConn) ask(t *testing.T, id uint64, ttl time.Duration) *reservev1.OfferMessage {
	t.Helper()
	c.send(t, &reservev1.OfferAsk{Ask: id, Ttl: durationpb.New(ttl)})
	for {
		if m := c.next(t); m.GetAsk() != 0 {
			if m.GetAsk() != id {
				t.Fatalf("answer to ask %d, want one to ask %d", m.GetAsk(), id)
			}
			return m
		}
	}
}

func (c *offerConn) release(t *testing.T, id uint64) {
	t.Helper()
	c.send(t, &reservev1.OfferAsk{Release: id})
}

func (c *offerConn) send(t *testing.T, m *reservev1.OfferAsk) {
	t.Helper()
	if err := c.stream.Send(m); err != nil {
		t.Fatalf("sending %v: %v", m, err)
	}
}

// serveOffers serves s on lis until the test ends.
func serveOffers(t *testing.T, lis net.Listener, s *offerServer) *grpc.Server {
	t.Helper()
	srv := grpc.NewServer()
	reservev1.RegisterReserveServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv
}

// startOffers serves s on a free port of 127.0.0.1 and returns a Client of
// it that backs off for 10ms unless opts say otherwise.
func startOffers(t *testing.T, s *offerServer, opts reserve.Options) *reserve.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOffers(t, lis, s)
	if opts.Backoff == 0 {
		opts.Backoff = 10 * time.Millisecond
	}
	return client(t, lis.Addr().String(), opts)
}

// runOffer runs c.Offer until the test ends or stop is called; stop
// returns what Offer returned.
func runOffer(t *testing.T, c *reserve.Client, gateName string, o gate.Offerer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Offer(ctx, gateName, o) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Offer did not return within 10s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); !errors.Is(err, context.Canceled) {
			t.Errorf("Offer returned %v, want context.Canceled", err)
		}
	})
	return stop
}

// offerer is a gate's permits as Offer sees them (gate.Offerer): it lends
// while it has one free, and records every permit lent and every release.
type offerer struct {
	spareCalls atomic.Int64

	mu    sync.Mutex
	total int
	free  int // guarded by mu, like the rest
	lent  []*lentPermit
	// wrong are broken invariants: a permit released twice, more free
	// than there are.
	wrong []string
}

// lentPermit is one permit the offerer lent.
type lentPermit struct {
	ttl        time.Duration
	lentAt     time.Time
	releases   int
	releasedAt time.Time
}

func newOfferer(permits int) *offerer { return &offerer{total: permits, free: permits} }

func (o *offerer) Lend(ttl time.Duration) (func(), bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.free == 0 {
		return nil, false
	}
	o.free--
	p := &lentPermit{ttl: ttl, lentAt: time.Now()}
	o.lent = append(o.lent, p)
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		p.releases++
		if p.releases > 1 {
			o.wrong = append(o.wrong, fmt.Sprintf("the permit lent for %s released %d times", p.ttl, p.releases))
			return
		}
		p.releasedAt = time.Now()
		o.free++
		if o.free > o.total {
			o.wrong = append(o.wrong, fmt.Sprintf("%d permits free of %d", o.free, o.total))
		}
	}, true
}

func (o *offerer) Spare() int {
	o.spareCalls.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.free
}

// take takes n permits for the pod's own calls, if they are free.
func (o *offerer) take(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.free < n {
		return false
	}
	o.free -= n
	return true
}

// give gives back n permits the pod's own calls took.
func (o *offerer) give(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.free += n
}

// permits returns a copy of the permits lent, in order.
func (o *offerer) permits() []lentPermit {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]lentPermit, len(o.lent))
	for i, p := range o.lent {
		out[i] = *p
	}
	return out
}

// allReleased reports whether every permit lent was released.
func (o *offerer) allReleased() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.lent {
		if p.releases == 0 {
			return false
		}
	}
	return true
}

// check fails the test on a broken invariant.
func (o *offerer) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, w := range o.wrong {
		t.Error(w)
	}
	if o.free < 0 || o.free > o.total {
		t.Errorf("%d permits free of %d", o.free, o.total)
	}
}

// The stream opens with the gate, the pod and the spare.
func TestOfferFirstMessage(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{Pod: "pod-a"})
	runOffer(t, c, "logistics", newOfferer(3))
	first := s.accept(t).first
	if first.GetGate() != "logistics" || first.GetPod() != "pod-a" || first.GetSpare() != 3 || first.GetAsk() != 0 || first.GetGranted() {
		t.Errorf("first message %v, want gate logistics, pod pod-a, spare 3", first)
	}
}

// A permit lent is held until the server releases it, once, whatever
// releases follow.
func TestOfferHeldUntilReleased(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	o := newOfferer(3)
	runOffer(t, c, "g", o)
	conn := s.accept(t)
	if a := conn.ask(t, 1, time.Hour); !a.GetGranted() || a.GetSpare() != 2 {
		t.Fatalf("answer %v, want granted with 2 spare", a)
	}
	if ps := o.permits(); len(ps) != 1 || ps[0].ttl != time.Hour || ps[0].releases != 0 {
		t.Fatalf("lent %+v, want one permit for an hour, held", ps)
	}
	conn.release(t, 1)
	eventually(t, "the permit is released", o.allReleased)
	// Released again, and a release of an id never asked: the answer to
	// the next ask comes after the pod has handled both.
	conn.release(t, 1)
	conn.release(t, 99)
	if a := conn.ask(t, 2, time.Hour); !a.GetGranted() || a.GetSpare() != 2 {
		t.Fatalf("answer %v, want granted with 2 spare", a)
	}
	if ps := o.permits(); ps[0].releases != 1 || ps[1].releases != 0 {
		t.Errorf("releases %d and %d, want the first permit released once and the second held", ps[0].releases, ps[1].releases)
	}
	o.check(t)
}

// Without a release the permit is released when its ttl has passed since
// the ask, and not before; a release after that changes nothing.
func TestOfferReleasedByTTL(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	o := newOfferer(1)
	runOffer(t, c, "g", o)
	conn := s.accept(t)
	const ttl = 50 * time.Millisecond
	asked := time.Now()
	if a := conn.ask(t, 1, ttl); !a.GetGranted() || a.GetSpare() != 0 {
		t.Fatalf("answer %v, want granted with none spare", a)
	}
	eventually(t, "the permit is released by its ttl", o.allReleased)
	if p := o.permits()[0]; p.releasedAt.Sub(asked) < ttl {
		t.Errorf("released %s after the ask, before its ttl of %s", p.releasedAt.Sub(asked), ttl)
	}
	conn.release(t, 1)
	if a := conn.ask(t, 2, time.Hour); !a.GetGranted() {
		t.Fatalf("answer %v, want granted: the first permit is back", a)
	}
	if ps := o.permits(); ps[0].releases != 1 {
		t.Errorf("the first permit released %d times, want once", ps[0].releases)
	}
	o.check(t)
}

// An ask the pod cannot serve is refused: no permit free, no ttl, an id
// it holds a permit for already.
func TestOfferRefuses(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	o := newOfferer(2)
	runOffer(t, c, "g", o)
	conn := s.accept(t)
	if a := conn.ask(t, 1, time.Hour); !a.GetGranted() {
		t.Fatalf("answer %v, want granted", a)
	}
	for _, tt := range []struct {
		why string
		id  uint64
		ttl time.Duration
	}{
		{"an id already lent for", 1, time.Hour},
		{"no ttl", 2, 0},
		{"a negative ttl", 3, -time.Second},
	} {
		if a := conn.ask(t, tt.id, tt.ttl); a.GetGranted() || a.GetSpare() != 1 {
			t.Errorf("%s: answer %v, want refused with 1 spare", tt.why, a)
		}
	}
	if !o.take(1) {
		t.Fatal("the pod's own call found no permit")
	}
	if a := conn.ask(t, 4, time.Hour); a.GetGranted() || a.GetSpare() != 0 {
		t.Errorf("with no permit free: answer %v, want refused with none spare", a)
	}
	if n := len(o.permits()); n != 1 {
		t.Errorf("%d permits lent, want 1", n)
	}
	o.check(t)
}

// A broken stream does not release what the pod lent: the borrower may
// use it until its ttl. The pod opens a new stream, whose ids name other
// asks.
func TestOfferStreamBreakKeepsPermits(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	o := newOfferer(2)
	runOffer(t, c, "g", o)
	conn := s.accept(t)
	const ttl = 300 * time.Millisecond
	asked := time.Now()
	if a := conn.ask(t, 1, ttl); !a.GetGranted() {
		t.Fatalf("answer %v, want granted", a)
	}
	conn.end <- status.Error(codes.Unavailable, "the server is going away")

	again := s.accept(t)
	if again.first.GetGate() != "g" {
		t.Errorf("first message of the new stream %v, want gate g", again.first)
	}
	// Ask 1 of the new stream is another ask: its release ends its own
	// permit, not the one the broken stream's ask 1 holds.
	if a := again.ask(t, 1, time.Hour); !a.GetGranted() || a.GetSpare() != 0 {
		t.Fatalf("answer %v, want granted with none spare", a)
	}
	again.release(t, 1)
	eventually(t, "both permits are released", o.allReleased)
	ps := o.permits()
	if early := ps[0].releasedAt.Sub(asked); early < ttl {
		t.Errorf("the broken stream's permit released %s after its ask, before its ttl of %s", early, ttl)
	}
	o.check(t)
}

// When its context ends, Offer returns its error; what the pod lent is
// released by its ttl, not before.
func TestOfferStopsKeepingPermits(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	o := newOfferer(1)
	stop := runOffer(t, c, "g", o)
	conn := s.accept(t)
	const ttl = 200 * time.Millisecond
	asked := time.Now()
	if a := conn.ask(t, 1, ttl); !a.GetGranted() {
		t.Fatalf("answer %v, want granted", a)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Offer returned %v, want context.Canceled", err)
	}
	eventually(t, "the permit is released", o.allReleased)
	if early := o.permits()[0].releasedAt.Sub(asked); early < ttl {
		t.Errorf("released %s after its ask, before its ttl of %s", early, ttl)
	}
	o.check(t)
}

// A restarted server, on the same address, gets a new stream.
func TestOfferReconnectsToARestartedServer(t *testing.T) {
	s := newOfferServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := serveOffers(t, lis, s)
	o := newOfferer(2)
	runOffer(t, client(t, addr, reserve.Options{Backoff: 10 * time.Millisecond}), "g", o)
	if a := s.accept(t).ask(t, 1, time.Hour); !a.GetGranted() {
		t.Fatalf("answer %v, want granted", a)
	}
	srv.Stop()

	restarted := newOfferServer()
	lis, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	serveOffers(t, lis, restarted)
	conn := restarted.accept(t)
	if conn.first.GetSpare() != 1 {
		t.Errorf("first message %v, want spare 1: the permit lent before is still held", conn.first)
	}
	if a := conn.ask(t, 1, time.Hour); !a.GetGranted() || a.GetSpare() != 0 {
		t.Errorf("answer %v, want granted with none spare", a)
	}
	o.check(t)
}

// A server that refuses the stream (it does not know the gate) is asked
// again after the backoff, quietly, until it accepts.
func TestOfferBacksOffWhenRefused(t *testing.T) {
	s := newOfferServer()
	s.refuse.Store(2)
	const backoff = 30 * time.Millisecond
	c := startOffers(t, s, reserve.Options{Backoff: backoff})
	runOffer(t, c, "g", newOfferer(1))
	if a := s.accept(t).ask(t, 1, time.Hour); !a.GetGranted() {
		t.Errorf("answer %v, want granted", a)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.opened) != 3 {
		t.Fatalf("%d streams opened, want 3: two refused, one accepted", len(s.opened))
	}
	for i := 1; i < len(s.opened); i++ {
		if gap := s.opened[i].Sub(s.opened[i-1]); gap < backoff {
			t.Errorf("stream %d opened %s after the one before, within the backoff of %s", i, gap, backoff)
		}
	}
}

// A server without offers (Unimplemented) leaves Offer waiting for its
// context.
func TestOfferServerWithoutOffers(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	reservev1.RegisterReserveServer(srv, &server{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := client(t, lis.Addr().String(), reserve.Options{Backoff: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Offer(ctx, "g", newOfferer(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Offer returned %v, want its context's error", err)
	}
}

// The pod tells the server its spare when it changes, and only then.
func TestOfferSendsSpareWhenItChanges(t *testing.T) {
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{SpareInterval: time.Millisecond})
	o := newOfferer(3)
	runOffer(t, c, "g", o)
	conn := s.accept(t)
	if !o.take(2) {
		t.Fatal("the pod's own calls found no permits")
	}
	if m := conn.next(t); m.GetSpare() != 1 || m.GetAsk() != 0 {
		t.Errorf("message %v, want spare 1", m)
	}
	o.give(1)
	if m := conn.next(t); m.GetSpare() != 2 || m.GetAsk() != 0 {
		t.Errorf("message %v, want spare 2", m)
	}
	// Unchanged for many reads: nothing sent.
	reads := o.spareCalls.Load()
	eventually(t, "the spare is read 20 more times", func() bool { return o.spareCalls.Load() >= reads+20 })
	select {
	case m := <-conn.msgs:
		t.Errorf("message %v with the spare unchanged", m)
	default:
	}
}

func TestOfferArguments(t *testing.T) {
	c := startOffers(t, newOfferServer(), reserve.Options{})
	if err := c.Offer(context.Background(), "", newOfferer(1)); err == nil {
		t.Error("no gate name: no error")
	}
	if err := c.Offer(context.Background(), "g", nil); err == nil {
		t.Error("no Offerer: no error")
	}
}

var _ gate.Offerer = (*offerer)(nil)

// gateOfferer is a gate's Offerer as the Runtime makes it, without the
// Runtime's refusals: LendOut and Spare, keeping none.
type gateOfferer struct{ g *gate.Gate }

func (o gateOfferer) Lend(time.Duration) (func(), bool) {
	p, ok := o.g.LendOut(0)
	if !ok {
		return nil, false
	}
	return p.ReleaseFunc(), true
}

func (o gateOfferer) Spare() int { return o.g.Spare(0) }

// A permit lent is the gate's own: the gate's calls find it taken until
// the server releases it.
func TestOfferLendsAGatesOwnPermit(t *testing.T) {
	g, err := gate.New("g", gate.Limits{Permits: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := newOfferServer()
	c := startOffers(t, s, reserve.Options{})
	runOffer(t, c, "g", gateOfferer{g})
	conn := s.accept(t)
	if conn.first.GetSpare() != 1 {
		t.Errorf("first message %v, want spare 1", conn.first)
	}
	if a := conn.ask(t, 1, time.Hour); !a.GetGranted() || a.GetSpare() != 0 {
		t.Fatalf("answer %v, want granted with none spare", a)
	}
	if st := g.Stats(); st.InFlight != 1 || st.LentOutInFlight != 1 {
		t.Errorf("gate stats: in flight %d, lent out %d; want the lent permit in both", st.InFlight, st.LentOutInFlight)
	}
	var r *gate.Rejection
	if _, err := g.TryAcquire(context.Background()); !errors.As(err, &r) {
		t.Errorf("the gate's own call with its permit lent: %v, want a rejection", err)
	}
	conn.release(t, 1)
	eventually(t, "the permit is back in the gate", func() bool { return g.Stats().InFlight == 0 })
	p, err := g.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("the gate's own call with its permit back: %v", err)
	}
	p.Release()
}
