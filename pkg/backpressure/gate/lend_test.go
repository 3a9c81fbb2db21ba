package gate_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// lender is a gate.Lender a test drives: each Lend is announced on asks and
// answered by what the test sends on answers (or by its context's end).
type lender struct {
	asks    chan ask
	answers chan error // nil: lend; else the error
	lent    atomic.Int64
	back    atomic.Int64
}

type ask struct{ hold, wait time.Duration }

func newLender() *lender {
	return &lender{asks: make(chan ask, 16), answers: make(chan error, 16)}
}

func (l *lender) Lend(ctx context.Context, hold, wait time.Duration) (gate.Loan, error) {
	l.asks <- ask{hold, wait}
	select {
	case err := <-l.answers:
		if err != nil {
			return nil, err
		}
		l.lent.Add(1)
		return &loan{back: &l.back}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// loan counts its return in back, and panics on a second one.
type loan struct {
	back     *atomic.Int64
	returned atomic.Bool
}

func (x *loan) Return() {
	if x.returned.Swap(true) {
		panic("a loan returned twice")
	}
	x.back.Add(1)
}

func (l *lender) nextAsk(t *testing.T) ask {
	t.Helper()
	select {
	case a := <-l.asks:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("the gate did not ask its lender within 5s")
		return ask{}
	}
}

// holdAll takes every permit of g and returns a function releasing them.
func holdAll(t *testing.T, g *gate.Gate) func() {
	t.Helper()
	var held []*gate.Permit
	for range g.Limits().Permits {
		p, err := g.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, &p)
	}
	return func() {
		for _, p := range held {
			p.Release()
		}
	}
}

func withDeadline(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLendWhenTheWaitingRoomIsFull: a call the waiting room cannot take
// asks the lender at once, for its remaining time, and is admitted on the
// loan, refused as before, or admitted as before when the lender fails.
func TestLendWhenTheWaitingRoomIsFull(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	l := newLender()
	g.SetLender(l)
	defer holdAll(t, g)()

	l.answers <- nil
	p, err := g.Acquire(withDeadline(t, 2*time.Second))
	if err != nil || !p.Borrowed() || !p.Held() {
		t.Fatalf("a call with no permit nor room left: %v (borrowed %v), want a lent permit", err, p.Borrowed())
	}
	if a := l.nextAsk(t); a.wait != 0 || a.hold > 2*time.Second || a.hold < time.Second {
		t.Errorf("asked for %+v: want no wait and the call's remaining time", a)
	}
	if g.InFlight() != 1 {
		t.Errorf("in flight %d: a lent permit is not the gate's", g.InFlight())
	}
	p.Release()
	p.Release()
	if l.back.Load() != 1 {
		t.Errorf("loans returned %d after two Releases, want 1", l.back.Load())
	}

	l.answers <- gate.ErrNotLent
	_, err = g.Acquire(withDeadline(t, 2*time.Second))
	wantRejection(t, err, gate.QueueFull)
	l.answers <- errors.New("unreachable")
	_, err = g.Acquire(withDeadline(t, 2*time.Second))
	wantRejection(t, err, gate.QueueFull)

	// Without a deadline there is nothing to bound a lease by; TryAcquire
	// never borrows.
	_, err = g.Acquire(context.Background())
	wantRejection(t, err, gate.QueueFull)
	_, err = g.TryAcquire(withDeadline(t, 2*time.Second))
	wantRejection(t, err, gate.QueueFull)
	if len(l.asks) != 2 {
		t.Errorf("the lender was asked %d more times, want 2 (the refused and the failed)", len(l.asks))
	}
	st := g.Stats()
	if st.Borrowed != 1 || st.NotLent != 1 || st.LendFailed != 1 || st.Admitted != 1 {
		t.Errorf("stats: borrowed %d, not lent %d, failed %d, admitted %d: want 1, 1, 1, 1", st.Borrowed, st.NotLent, st.LendFailed, st.Admitted)
	}
}

// TestLendWithoutARoomWaitsAsTheRoomWould: a call the waiting room cannot
// take waits for a lent permit as long as the room would have kept it
// (MaxQueueWait, AcquireTimeout, or the deadline less the typical latency,
// whichever is shortest), so that a permit going back to the reserve
// within that time serves it; then it is shed as before.
func TestLendWithoutARoomWaitsAsTheRoomWould(t *testing.T) {
	for _, c := range []struct {
		name          string
		limits        gate.Limits
		deadline      time.Duration
		minWait, wait time.Duration
	}{
		{"a room of no place", gate.Limits{Permits: 1, MaxQueueWait: 40 * time.Millisecond}, 2 * time.Second, 40 * time.Millisecond, 40 * time.Millisecond},
		{"the room full", gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 40 * time.Millisecond}, 2 * time.Second, 40 * time.Millisecond, 40 * time.Millisecond},
		{"an acquire timeout", gate.Limits{Permits: 1, AcquireTimeout: 30 * time.Millisecond}, 2 * time.Second, 30 * time.Millisecond, 30 * time.Millisecond},
		{"the deadline nearer", gate.Limits{Permits: 1, MaxQueueWait: time.Second, TypicalLatency: 800 * time.Millisecond}, time.Second, 50 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mustNew(t, c.limits)
			defer holdAll(t, g)()
			if c.limits.QueueCapacity > 0 {
				// A call without a deadline fills the room; it asks no lender.
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() { _, _ = g.Acquire(ctx) }()
				eventually(t, "the room is full", func() bool { return g.Stats().Queued == 1 })
			}
			l := newLender()
			g.SetLender(l)

			l.answers <- nil
			p, err := g.Acquire(withDeadline(t, c.deadline))
			if err != nil || !p.Borrowed() {
				t.Fatalf("%v (borrowed %v), want a lent permit", err, p.Borrowed())
			}
			p.Release()
			if a := l.nextAsk(t); a.wait < c.minWait || a.wait > c.wait {
				t.Errorf("asked to wait %s, want within [%s, %s]", a.wait, c.minWait, c.wait)
			}

			l.answers <- gate.ErrNotLent
			_, err = g.Acquire(withDeadline(t, c.deadline))
			wantRejection(t, err, gate.QueueFull)
			// Admitted counts the gate's own permit taken above, not the loan.
			if st := g.Stats(); st.Borrowed != 1 || st.NotLent != 1 || st.Admitted != 1 {
				t.Errorf("stats: borrowed %d, not lent %d, admitted %d: want 1, 1, 1", st.Borrowed, st.NotLent, st.Admitted)
			}
		})
	}
}

// TestLendWhileWaiting: a call that waits in the waiting room asks the
// lender at the same time, to wait as long, and takes whichever permit
// comes first.
func TestLendWhileWaiting(t *testing.T) {
	limits := gate.Limits{Permits: 1, QueueCapacity: 4, MaxQueueWait: time.Second}

	t.Run("lent first", func(t *testing.T) {
		g := mustNew(t, limits)
		l := newLender()
		g.SetLender(l)
		defer holdAll(t, g)()
		done := acquireAsync(withDeadline(t, 3*time.Second), g)
		if a := l.nextAsk(t); a.wait != time.Second || a.hold < 2*time.Second {
			t.Errorf("asked for %+v: want to wait the gate's 1s and hold the call's remaining 3s", a)
		}
		eventually(t, "the call waits", func() bool { return g.Stats().Queued == 1 })
		l.answers <- nil
		r := <-done
		if r.err != nil || !r.borrowed {
			t.Fatalf("lent while waiting: %v (borrowed %v)", r.err, r.borrowed)
		}
		if st := g.Stats(); st.Queued != 0 || st.Borrowed != 1 || st.Admitted != 1 {
			t.Errorf("after the loan: queued %d, borrowed %d, admitted %d", st.Queued, st.Borrowed, st.Admitted)
		}
	})

	t.Run("own permit first", func(t *testing.T) {
		g := mustNew(t, limits)
		l := newLender()
		g.SetLender(l)
		release := holdAll(t, g)
		done := acquireAsync(withDeadline(t, 3*time.Second), g)
		l.nextAsk(t)
		eventually(t, "the call waits", func() bool { return g.Stats().Queued == 1 })
		release()
		r := <-done
		if r.err != nil || r.borrowed {
			t.Fatalf("own permit while waiting: %v (borrowed %v)", r.err, r.borrowed)
		}
		// The lender, whose ask was given up, lends nonetheless: the loan
		// goes back.
		l.answers <- nil
		eventually(t, "the unwanted loan is returned", func() bool { return l.back.Load() == l.lent.Load() })
	})

	t.Run("refused", func(t *testing.T) {
		g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 4, MaxQueueWait: 50 * time.Millisecond})
		l := newLender()
		g.SetLender(l)
		defer holdAll(t, g)()
		done := acquireAsync(withDeadline(t, 3*time.Second), g)
		l.nextAsk(t)
		l.answers <- gate.ErrNotLent
		r := <-done
		wantRejection(t, r.err, gate.WaitTimeout)
		if st := g.Stats(); st.NotLent != 1 {
			t.Errorf("not lent %d, want 1", st.NotLent)
		}
	})

	t.Run("closed", func(t *testing.T) {
		g := mustNew(t, limits)
		l := newLender()
		g.SetLender(l)
		defer holdAll(t, g)()
		done := acquireAsync(withDeadline(t, 3*time.Second), g)
		l.nextAsk(t)
		g.Close()
		wantRejection(t, (<-done).err, gate.Closed)
		l.answers <- nil
		eventually(t, "the unwanted loan is returned", func() bool { return l.back.Load() == l.lent.Load() })
	})
}

type acquired struct {
	err      error
	borrowed bool
}

// acquireAsync acquires from g in a goroutine and releases at once.
func acquireAsync(ctx context.Context, g *gate.Gate) <-chan acquired {
	done := make(chan acquired, 1)
	go func() {
		p, err := g.Acquire(ctx)
		done <- acquired{err, p.Borrowed()}
		p.Release()
	}()
	return done
}

// TestLendStress: many calls against a gate whose lender lends, refuses,
// fails and answers late, at random; every loan lent is returned exactly
// once, and the gate's own permits stay within its limit.
func TestLendStress(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 4, QueueCapacity: 8, MaxQueueWait: 5 * time.Millisecond})
	var out, peak atomic.Int64
	l := &randomLender{}
	g.SetLender(l)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			for j := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(i+j)%20)*time.Millisecond)
				p, err := g.Acquire(ctx)
				if err == nil && !p.Borrowed() {
					n := out.Add(1)
					for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
					}
					time.Sleep(time.Duration(j%3) * 100 * time.Microsecond)
					out.Add(-1)
				}
				p.Release()
				cancel()
			}
		})
	}
	wg.Wait()
	eventually(t, "every loan is back", func() bool { return l.back.Load() == l.lent.Load() })
	if peak.Load() > 4 {
		t.Errorf("%d calls held the gate's own permits at once, above its 4", peak.Load())
	}
	if st := g.Stats(); st.Borrowed == 0 || st.NotLent == 0 || st.LendFailed == 0 || st.Borrowed > uint64(l.lent.Load()) {
		t.Errorf("stats %+v, %d lent: want every outcome seen, and no more borrowed than lent", st, l.lent.Load())
	}
}

// randomLender lends, refuses or fails at random, sometimes after a delay.
type randomLender struct {
	n          atomic.Uint64
	lent, back atomic.Int64
}

func (l *randomLender) Lend(ctx context.Context, _, wait time.Duration) (gate.Loan, error) {
	n := l.n.Add(1)
	if n%4 == 0 {
		select {
		case <-time.After(time.Duration(n%3) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	switch n % 3 {
	case 0:
		l.lent.Add(1)
		return &loan{back: &l.back}, nil
	case 1:
		return nil, gate.ErrNotLent
	}
	return nil, errors.New("down")
}

func TestReleaseFuncOfALoan(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	l := newLender()
	g.SetLender(l)
	defer holdAll(t, g)()
	l.answers <- nil
	p, err := g.Acquire(withDeadline(t, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	release := p.ReleaseFunc()
	if p.Held() {
		t.Error("the Permit still holds the loan after ReleaseFunc")
	}
	release()
	release()
	if l.back.Load() != 1 {
		t.Errorf("loans returned %d, want 1", l.back.Load())
	}
}
