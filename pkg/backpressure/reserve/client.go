package reserve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Defaults of Options.
const (
	// DefaultBudget is the time a borrow's round trip may take beyond the
	// wait for a permit: a round trip to a permit server in the same
	// cluster takes a fraction of it. A call of a gate without a waiting
	// room, which would be shed at once, waits no longer.
	DefaultBudget = time.Millisecond
	// DefaultBackoff is how long a Lender does not ask an unreachable
	// server, so that calls do not each pay the budget while it is down.
	DefaultBackoff = time.Second
	// DefaultSpareInterval is how often Offer reads its gate's spare
	// permits. The server asks the pods that said they have the most
	// spare, so a figure older than a few milliseconds, a fraction of a
	// call, sends its asks to pods whose permits were taken since (asks
	// refused, borrowers shed) and past pods that came free. Only a change
	// is sent, so an idle or steady pod sends nothing, and the read is a
	// look at the gate's counts.
	DefaultSpareInterval = 5 * time.Millisecond
	// returnTimeout bounds a Return in the background.
	returnTimeout = 5 * time.Second
	// quietUnknownGate is how long a Lender does not ask for a gate the
	// server does not know.
	quietUnknownGate = time.Second
)

// Options configure a Client.
type Options struct {
	// Pod names this pod to the server, which counts borrows per pod (the
	// demand signal of shares that follow demand). Required.
	Pod string
	// Budget bounds a borrow's round trip beyond its wait for a permit;
	// DefaultBudget when zero.
	Budget time.Duration
	// Backoff is how long a Lender does not ask after the server was
	// unreachable, and how long Offer waits before it opens its stream
	// again after the stream broke; DefaultBackoff when zero.
	Backoff time.Duration
	// SpareInterval is how often Offer reads its gate's spare permits, to
	// tell the server when they changed; DefaultSpareInterval when zero.
	SpareInterval time.Duration
}

// Client borrows from one permit server over one gRPC connection. It is
// safe for concurrent use.
type Client struct {
	rpc  reservev1.ReserveClient
	opts Options

	mu    sync.Mutex
	quiet map[string]quiet // by gate; guarded by mu
}

// quiet is a time a Lender does not ask the server, and why.
type quiet struct {
	until time.Time
	// err is the error the Lender answers meanwhile: a refusal when the
	// server said when to ask again, a failure when it was unreachable.
	err error
}

// New returns a Client that borrows over conn (such as grpc.NewClient's
// connection to the permit server's Service).
func New(conn grpc.ClientConnInterface, opts Options) (*Client, error) {
	if opts.Pod == "" {
		return nil, errors.New("reserve: options: Pod is required")
	}
	if opts.Budget < 0 || opts.Backoff < 0 {
		return nil, fmt.Errorf("reserve: options: Budget and Backoff must not be negative, got %s and %s", opts.Budget, opts.Backoff)
	}
	if opts.SpareInterval < 0 {
		return nil, fmt.Errorf("reserve: options: SpareInterval must not be negative, got %s", opts.SpareInterval)
	}
	if opts.Budget == 0 {
		opts.Budget = DefaultBudget
	}
	if opts.Backoff == 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.SpareInterval == 0 {
		opts.SpareInterval = DefaultSpareInterval
	}
	return &Client{rpc: reservev1.NewReserveClient(conn), opts: opts, quiet: map[string]quiet{}}, nil
}

// Lender returns the gate.Lender that borrows for the gate named name.
func (c *Client) Lender(name string) gate.Lender { return lender{c: c, gate: name} }

type lender struct {
	c    *Client
	gate string
}

// Refusal is the error of a borrow the server refused; it matches
// gate.ErrNotLent.
type Refusal struct {
	Reason reservev1.Reason
	// Message is the server's.
	Message string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("reserve: not lent (%s): %s", r.Reason, r.Message)
}

// Is makes a Refusal match gate.ErrNotLent.
func (r *Refusal) Is(target error) bool { return target == gate.ErrNotLent }

// Lend asks the server for one permit for a call that holds it at most
// hold, waiting up to wait for one.
func (l lender) Lend(ctx context.Context, hold, wait time.Duration) (gate.Loan, error) {
	c := l.c
	now := time.Now()
	c.mu.Lock()
	q := c.quiet[l.gate]
	c.mu.Unlock()
	if now.Before(q.until) {
		return nil, q.err
	}
	rctx, cancel := context.WithTimeout(ctx, wait+c.opts.Budget)
	defer cancel()
	ticket := newTicket()
	resp, err := c.rpc.Borrow(rctx, &reservev1.BorrowRequest{
		Gate: l.gate, Pod: c.opts.Pod, Hold: durationpb.New(hold), Wait: durationpb.New(wait), Ticket: ticket,
	})
	if err != nil {
		if code := status.Code(err); rctx.Err() != nil || code == codes.DeadlineExceeded || code == codes.Canceled {
			// Given up on (the budget ran out, or the call went on
			// without it): a lease granted meanwhile may be on its way,
			// and would keep a permit from every pod until its time is
			// up. Take the borrow back by its ticket. The server may
			// report the deadline before this side's timer has fired.
			c.withdraw(l.gate, ticket)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		unavailable := status.Code(err) == codes.Unavailable
		err = fmt.Errorf("reserve: borrowing for gate %s: %w", l.gate, err)
		if unavailable {
			c.quietFor(l.gate, now.Add(c.opts.Backoff), fmt.Errorf("reserve: not asking for gate %s for %s after: %w", l.gate, c.opts.Backoff, err))
		}
		return nil, err
	}
	if lease := resp.GetLease(); lease != nil {
		return &loan{c: c, gate: l.gate, incarnation: lease.GetIncarnation(), id: lease.GetId()}, nil
	}
	r := resp.GetRefusal()
	refusal := &Refusal{Reason: r.GetReason(), Message: r.GetMessage()}
	switch r.GetReason() {
	case reservev1.Reason_REASON_LEARNING:
		c.quietFor(l.gate, now.Add(r.GetRetryAfter().AsDuration()), refusal)
	case reservev1.Reason_REASON_UNKNOWN_GATE:
		c.quietFor(l.gate, now.Add(quietUnknownGate), refusal)
	}
	return nil, refusal
}

// quietFor makes the gate's Lender answer err without asking until t.
func (c *Client) quietFor(gate string, t time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.quiet[gate].until) {
		c.quiet[gate] = quiet{until: t, err: err}
	}
}

// newTicket draws a borrow's ticket: random, so that another pod cannot
// take the borrow back by guessing it, and never 0, which names none.
func newTicket() uint64 {
	for {
		if t := rand.Uint64(); t != 0 {
			return t
		}
	}
}

// withdraw takes back, in the background, the borrow for gate with
// ticket, whatever became of it.
func (c *Client) withdraw(gate string, ticket uint64) {
	c.returnInBackground(&reservev1.ReturnRequest{Gate: gate, Ticket: ticket})
}

// returnInBackground sends req without making the caller wait for the
// round trip. A Return that fails leaves the lease it names to end on its
// own.
func (c *Client) returnInBackground(req *reservev1.ReturnRequest) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), returnTimeout)
		defer cancel()
		_, _ = c.rpc.Return(ctx, req)
	}()
}

// loan is a lease the server granted.
type loan struct {
	c               *Client
	gate            string
	incarnation, id uint64
}

// Return gives the permit back in the background.
func (x *loan) Return() {
	x.c.returnInBackground(&reservev1.ReturnRequest{Gate: x.gate, Incarnation: x.incarnation, Id: x.id})
}
