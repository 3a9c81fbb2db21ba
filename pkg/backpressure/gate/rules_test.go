package gate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// acquire takes one of g's own permits, failing the test otherwise.
func acquire(t *testing.T, g *gate.Gate) *gate.Permit {
	t.Helper()
	p, err := g.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

// borrow acquires on a loan the lender l grants: g's permits and room must
// be taken.
func borrow(t *testing.T, g *gate.Gate, l *lender) *gate.Permit {
	t.Helper()
	l.answers <- nil
	p, err := g.Acquire(withDeadline(t, 5*time.Second))
	if err != nil || !p.Borrowed() {
		t.Fatalf("a call with the gate's permits and room taken: %v (borrowed %v), want a lent permit", err, p.Borrowed())
	}
	l.nextAsk(t)
	return &p
}

// TestReturnEarly: under LendRules.ReturnEarly, a permit of the gate's
// that frees with nobody waiting goes to a call running on a loan, and the
// loan goes back at once; the call's end then frees the gate's permit and
// returns nothing more. A loan whose call ends first goes back then, and
// the gate's releases take the fast path again. Without the rule the loan
// stays with its call.
func TestReturnEarly(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 2})
	l := newLender()
	if err := g.SetLenderRules(l, gate.LendRules{ReturnEarly: true}); err != nil {
		t.Fatal(err)
	}
	a, b := acquire(t, g), acquire(t, g)
	p := borrow(t, g, l)
	if g.InFlight() != 2 || !g.QueuedBit() || g.Stats().BorrowedInFlight != 1 {
		t.Fatalf("in flight %d, borrowed in flight %d, queued bit %v with a loan that may move: want 2, 1 and set",
			g.InFlight(), g.Stats().BorrowedInFlight, g.QueuedBit())
	}
	a.Release()
	if got := l.back.Load(); got != 1 {
		t.Fatalf("loans returned after a permit of the gate's freed: %d, want 1", got)
	}
	if st := g.Stats(); g.InFlight() != 2 || st.BorrowedInFlight != 0 || st.ReturnedEarly != 1 || !p.Borrowed() {
		t.Errorf("in flight %d, borrowed in flight %d, returned early %d, borrowed %v: want the call on the gate's permit, counted, still reported borrowed",
			g.InFlight(), st.BorrowedInFlight, st.ReturnedEarly, p.Borrowed())
	}
	if g.QueuedBit() {
		t.Error("queued bit set with no loan left to move")
	}
	p.Release() // panics in loan.Return if the loan went back twice
	if g.InFlight() != 1 || l.back.Load() != 1 {
		t.Errorf("after the moved call ended: in flight %d, loans returned %d; want 1 and 1", g.InFlight(), l.back.Load())
	}

	// A loan whose call ends before any permit frees goes back then.
	c := acquire(t, g)
	q := borrow(t, g, l)
	q.Release()
	if l.back.Load() != 2 || g.Stats().ReturnedEarly != 1 || g.QueuedBit() {
		t.Errorf("a loan ended on its own: returned %d, early %d, queued bit %v; want 2, 1, clear",
			l.back.Load(), g.Stats().ReturnedEarly, g.QueuedBit())
	}
	b.Release()
	c.Release()
	if g.InFlight() != 0 {
		t.Errorf("in flight %d after every call ended", g.InFlight())
	}

	// Without the rule, the loan stays with its call.
	g.SetLender(l)
	a, b = acquire(t, g), acquire(t, g)
	r := borrow(t, g, l)
	a.Release()
	if l.back.Load() != 2 || g.InFlight() != 1 || g.Stats().BorrowedInFlight != 1 {
		t.Errorf("without ReturnEarly: returned %d, in flight %d after a permit freed; want 2 and 1", l.back.Load(), g.InFlight())
	}
	r.Release()
	b.Release()
	if l.back.Load() != 3 || g.InFlight() != 0 || g.Stats().BorrowedInFlight != 0 {
		t.Errorf("without ReturnEarly: returned %d, in flight %d, borrowed in flight %d at the end; want 3, 0, 0",
			l.back.Load(), g.InFlight(), g.Stats().BorrowedInFlight)
	}
}

// TestReturnEarlyServesWaitersFirst: a permit that frees goes to the call
// waiting in the room, which has nothing else; only the next one moves a
// loan. A larger limit moves loans too.
func TestReturnEarlyServesWaitersFirst(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 5 * time.Second})
	l := newLender()
	if err := g.SetLenderRules(l, gate.LendRules{ReturnEarly: true}); err != nil {
		t.Fatal(err)
	}
	a := acquire(t, g)
	waited := make(chan error, 1)
	var w gate.Permit
	go func() {
		var err error
		w, err = g.Acquire(withDeadline(t, 5*time.Second))
		waited <- err
	}()
	l.nextAsk(t) // the waiter asks beside its wait: refuse it
	l.answers <- gate.ErrNotLent
	eventually(t, "the waiter's loan refused", func() bool { return g.Stats().NotLent == 1 })
	p := borrow(t, g, l) // the room is full: lent at once

	a.Release()
	if err := <-waited; err != nil || w.Borrowed() {
		t.Fatalf("the waiter: %v (borrowed %v), want the gate's permit", err, w.Borrowed())
	}
	if l.back.Load() != 0 {
		t.Fatalf("a loan went back while a call waited for the permit")
	}
	w.Release()
	if l.back.Load() != 1 || g.InFlight() != 1 {
		t.Fatalf("after the waiter ended: returned %d, in flight %d; want the loan moved", l.back.Load(), g.InFlight())
	}
	p.Release()

	// A larger limit moves a loan at once.
	a = acquire(t, g)
	p = borrow(t, g, l)
	if err := g.Update(gate.Limits{Permits: 2, QueueCapacity: 1, MaxQueueWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if l.back.Load() != 2 || g.InFlight() != 2 {
		t.Errorf("after the limit rose: returned %d, in flight %d; want the loan moved", l.back.Load(), g.InFlight())
	}
	p.Release()
	a.Release()
	if g.InFlight() != 0 || g.QueuedBit() {
		t.Errorf("in flight %d, queued bit %v at the end", g.InFlight(), g.QueuedBit())
	}
}

// TestAskAfter: a call with a place in the room asks the lender only after
// AskAfter, and not at all when a permit of the gate's frees first; a call
// whose wait is no longer than AskAfter asks at once, and so does a call
// without a place in the room.
func TestAskAfter(t *testing.T) {
	const askAfter = 100 * time.Millisecond
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 5 * time.Second})
	l := newLender()
	if err := g.SetLenderRules(l, gate.LendRules{AskAfter: askAfter}); err != nil {
		t.Fatal(err)
	}

	// A permit freed within AskAfter: the lender is never asked.
	a := acquire(t, g)
	waited := make(chan error, 1)
	go func() {
		p, err := g.Acquire(withDeadline(t, 5*time.Second))
		if err == nil && p.Borrowed() {
			err = errors.New("borrowed")
		}
		p.Release()
		waited <- err
	}()
	eventually(t, "the call in the room", func() bool { return g.Stats().Queued == 1 })
	a.Release()
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v, want the gate's permit", err)
	}
	time.Sleep(2 * askAfter)
	if n := len(l.asks); n != 0 {
		t.Fatalf("the lender was asked %d times for a call served within AskAfter", n)
	}

	// Nothing frees: the call asks after AskAfter, for the rest of its wait.
	a = acquire(t, g)
	start := time.Now()
	go func() {
		p, err := g.Acquire(withDeadline(t, 5*time.Second))
		if err == nil && !p.Borrowed() {
			err = errors.New("not borrowed")
		}
		p.Release()
		waited <- err
	}()
	asked := l.nextAsk(t)
	if since := time.Since(start); since < askAfter {
		t.Errorf("asked %s after the call came, before AskAfter %s", since, askAfter)
	}
	if asked.wait > 5*time.Second-askAfter {
		t.Errorf("asked to wait %s: want at most the call's wait less AskAfter", asked.wait)
	}
	l.answers <- nil
	if err := <-waited; err != nil {
		t.Fatalf("the waiter: %v, want a lent permit", err)
	}

	// A wait no longer than AskAfter: asked at once.
	if err := g.Update(gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: askAfter / 2}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	go func() {
		p, err := g.Acquire(withDeadline(t, 5*time.Second))
		p.Release()
		waited <- err
	}()
	asked = l.nextAsk(t)
	if since := time.Since(start); since >= askAfter/2 {
		t.Errorf("a call waiting at most %s asked after %s: want at once", askAfter/2, since)
	}
	l.answers <- nil
	if err := <-waited; err != nil {
		t.Fatalf("the short waiter: %v, want a lent permit", err)
	}

	// The room full: a call without a place asks at once, before the call
	// in the room reaches AskAfter.
	if err := g.Update(gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	roomed := make(chan error, 1)
	go func() {
		p, err := g.Acquire(withDeadline(t, 5*time.Second))
		p.Release()
		roomed <- err
	}()
	eventually(t, "the call in the room", func() bool { return g.Stats().Queued == 1 })
	start = time.Now()
	go func() {
		p, err := g.Acquire(withDeadline(t, 5*time.Second))
		p.Release()
		waited <- err
	}()
	l.nextAsk(t)
	if since := time.Since(start); since >= askAfter/2 {
		t.Errorf("a call without a place in the room asked after %s: want at once", since)
	}
	l.answers <- nil
	if err := <-waited; err != nil {
		t.Fatalf("the call without a place: %v, want a lent permit", err)
	}
	l.nextAsk(t) // the call in the room, after AskAfter
	l.answers <- nil
	if err := <-roomed; err != nil {
		t.Fatalf("the call in the room: %v, want a lent permit", err)
	}
	a.Release()
}

// TestLendRulesValidate: a negative AskAfter is refused with the field
// named, and the lender in force stays.
func TestLendRulesValidate(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	l := newLender()
	g.SetLender(l)
	err := g.SetLenderRules(newLender(), gate.LendRules{AskAfter: -time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "AskAfter") {
		t.Fatalf("SetLenderRules with a negative AskAfter: %v, want an error naming AskAfter", err)
	}
	defer holdAll(t, g)()
	borrow(t, g, l).Release() // the first lender still lends
}

// poolLender lends the permits of a pool of size cap, as a permit server
// does, waiting up to wait for one.
type poolLender struct {
	pool       chan struct{}
	lent, back atomic.Int64
}

func (l *poolLender) Lend(ctx context.Context, _, wait time.Duration) (gate.Loan, error) {
	select {
	case l.pool <- struct{}{}:
		l.lent.Add(1)
		return &poolLoan{l: l}, nil
	default:
	}
	if wait <= 0 {
		return nil, gate.ErrNotLent
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.pool <- struct{}{}:
		l.lent.Add(1)
		return &poolLoan{l: l}, nil
	case <-t.C:
		return nil, gate.ErrNotLent
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type poolLoan struct {
	l    *poolLender
	once atomic.Bool
}

func (x *poolLoan) Return() {
	if x.once.Swap(true) {
		panic("a loan returned twice")
	}
	<-x.l.pool
	x.l.back.Add(1)
}

// TestStressLoansUnderRules runs many callers against a gate whose limit
// changes, borrowing from a pool under both rules: at every moment the
// calls running stay within the largest limit plus the pool, the pool's
// own bound holds, and at the end every loan went back once, no permit of
// the gate is held, and the releases take the fast path again.
func TestStressLoansUnderRules(t *testing.T) {
	const (
		callers  = 32
		maxLimit = 6
		pool     = 4
	)
	duration := time.Second
	if testing.Short() {
		duration = 200 * time.Millisecond
	}
	g := mustNew(t, gate.Limits{Permits: maxLimit, QueueCapacity: 4, MaxQueueWait: 2 * time.Millisecond})
	l := &poolLender{pool: make(chan struct{}, pool)}
	if err := g.SetLenderRules(l, gate.LendRules{ReturnEarly: true, AskAfter: 500 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	var running, peak, borrowed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(rng.IntN(3000)) * time.Microsecond):
			}
			if err := g.Update(gate.Limits{Permits: rng.IntN(maxLimit + 1), QueueCapacity: rng.IntN(5), MaxQueueWait: 2 * time.Millisecond}); err != nil {
				t.Error(err)
			}
		}
	})
	for i := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				p, err := g.Acquire(ctx)
				if err == nil {
					n := running.Add(1)
					for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
					}
					if p.Borrowed() {
						borrowed.Add(1)
					}
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
					running.Add(-1)
					p.Release()
				}
				cancel()
			}
		})
	}
	time.Sleep(duration)
	close(stop)
	wg.Wait()

	st := g.Stats()
	if p := peak.Load(); p > maxLimit+pool {
		t.Errorf("peak running %d, above the largest limit %d plus the pool %d", p, maxLimit, pool)
	}
	// Lends abandoned by calls served first go back in the background.
	eventually(t, "every loan back", func() bool { return l.back.Load() == l.lent.Load() })
	if g.InFlight() != 0 || g.QueuedBit() || st.BorrowedInFlight != 0 {
		t.Errorf("at the end: in flight %d, borrowed in flight %d, queued bit %v; want 0, 0 and clear", g.InFlight(), st.BorrowedInFlight, g.QueuedBit())
	}
	if borrowed.Load() == 0 || st.ReturnedEarly == 0 {
		t.Errorf("borrowed %d, returned early %d: the rules' paths did not run", borrowed.Load(), st.ReturnedEarly)
	}
	t.Logf("borrowed %d, returned early %d, lent %d, peak %d", borrowed.Load(), st.ReturnedEarly, l.lent.Load(), peak.Load())
}
