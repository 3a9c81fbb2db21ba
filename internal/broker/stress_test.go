package broker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// use is the time a borrower used a lent permit: from when it had the
// lease to when it returned it, or, for a return it lost, to the end of
// what the lease entitled it to (when it asked + ttl, the rule a caller
// follows since it cannot know when the lease was granted).
type use struct{ from, to time.Time }

// TestStress runs borrowers that hold, return, lose their returns, wait and
// give up on answers (taking the borrow back by ticket),
// a capacity that moves up and down, and returns forged and replayed, on a
// Broker that starts learning. It checks at every grant that the leases
// outstanding are within the capacity in force and that nothing is lent
// while learning; at the end that no two borrowers used more permits at
// once than the largest capacity, and that every lease was returned or
// expired.
func TestStress(t *testing.T) {
	const (
		maxCapacity = 8
		borrowers   = 16
		run         = 1500 * time.Millisecond
		learning    = 300 * time.Millisecond
	)
	b, err := broker.New(broker.Options{MaxLease: learning, Margin: 5 * time.Millisecond, MaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapacity("g", maxCapacity); err != nil {
		t.Fatal(err)
	}
	var violations atomic.Int64
	var firstViolation atomic.Value
	violate := func(msg string) {
		if violations.Add(1) == 1 {
			firstViolation.Store(msg)
		}
	}
	b.OnGrant("g", func(leases, capacity int) {
		if leases > capacity {
			violate("a grant took the leases above the capacity in force")
		}
		if time.Now().Before(b.LearningUntil()) {
			violate("a grant while learning")
		}
	})

	ctx, stop := context.WithTimeout(context.Background(), run)
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var uses []use
	var returnedTrue, forgedTrue atomic.Int64
	var seen sync.Map // leases granted, for replays
	for i := range borrowers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				hold := time.Duration(5+r.IntN(45)) * time.Millisecond
				asked := time.Now()
				// Every borrow carries a ticket; one borrower in three
				// gives up on the answer after a random budget, as the
				// library's client does, and takes the borrow back by its
				// ticket, from another goroutine, while the server may be
				// granting it.
				ticket := uint64(i+1)<<40 | r.Uint64()>>24
				bctx, cancel := ctx, context.CancelFunc(func() {})
				if i%3 == 0 {
					bctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(15))*time.Millisecond)
				}
				l, err := b.Borrow(bctx, broker.Request{Gate: "g", Pod: "pod", Hold: hold, Wait: time.Duration(r.IntN(20)) * time.Millisecond, Ticket: ticket})
				gaveUp := bctx.Err() != nil && ctx.Err() == nil
				cancel()
				if gaveUp {
					delay := time.Duration(r.IntN(3)) * time.Millisecond
					wg.Go(func() {
						time.Sleep(delay)
						b.Withdraw("g", ticket)
					})
					if err == nil {
						continue // an answer after giving up is not used
					}
				}
				var refusal *broker.Refusal
				switch {
				case errors.As(err, &refusal):
					if refusal.Reason == reservev1.Reason_REASON_LEARNING {
						time.Sleep(min(refusal.RetryAfter, 20*time.Millisecond))
					}
					continue
				case err != nil:
					continue // the run ended while waiting
				}
				got := time.Now()
				seen.Store(l.ID, l)
				// A call uses its permit until its deadline at the latest,
				// hold after it asked: a borrow that waited past it is
				// given back unused.
				deadline := asked.Add(hold)
				if !got.Before(deadline) {
					if b.Return("g", l.Incarnation, l.ID) {
						returnedTrue.Add(1)
					}
					continue
				}
				time.Sleep(min(time.Duration(r.IntN(int(hold))), time.Until(deadline)))
				if r.IntN(5) == 0 { // a lost return: the lease runs out
					mu.Lock()
					uses = append(uses, use{got, asked.Add(l.TTL)})
					mu.Unlock()
					continue
				}
				// A borrower late past its entitlement (a sleep overshot on
				// a loaded machine) is at fault, not the server: count its
				// use up to the entitlement.
				mu.Lock()
				uses = append(uses, use{got, minTime(time.Now(), asked.Add(l.TTL))})
				mu.Unlock()
				if b.Return("g", l.Incarnation, l.ID) {
					returnedTrue.Add(1)
				}
			}
		})
	}
	wg.Go(func() { // the capacity moves, shrinking by attrition
		r := rand.New(rand.NewPCG(99, 2))
		for ctx.Err() == nil {
			_ = b.SetCapacity("g", r.IntN(maxCapacity+1))
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
		}
	})
	wg.Go(func() { // forged and replayed returns
		r := rand.New(rand.NewPCG(7, 3))
		for ctx.Err() == nil {
			if b.Return("g", b.Incarnation(), r.Uint64()) || b.Return("g", r.Uint64(), r.Uint64()) {
				forgedTrue.Add(1)
			}
			seen.Range(func(_, v any) bool {
				l := v.(broker.Lease)
				if b.Return("g", l.Incarnation+1, l.ID) {
					forgedTrue.Add(1)
				}
				return r.IntN(8) != 0
			})
			time.Sleep(time.Millisecond)
		}
	})
	wg.Go(func() { _ = b.Run(ctx, 5*time.Millisecond) })
	wg.Wait()

	if n := violations.Load(); n > 0 {
		t.Fatalf("%d violations; the first: %s", n, firstViolation.Load())
	}
	if n := forgedTrue.Load(); n > 0 {
		t.Errorf("%d forged returns ended a lease", n)
	}
	if peak := peakOverlap(uses); peak > maxCapacity {
		t.Errorf("borrowers used %d permits at once, above the largest capacity %d", peak, maxCapacity)
	}
	if len(uses) < 100 {
		t.Errorf("only %d leases in %s: the test checked little", len(uses), run)
	}

	// Nothing leaked: once every lease has run out, none is outstanding,
	// and each was returned or expired. (The server returns, too, a lease
	// granted just as its borrower gave up waiting.)
	time.Sleep(learning)
	b.Expire()
	s := stats(t, b)
	var granted uint64
	for _, c := range b.Borrowers() {
		granted += c.Granted
	}
	if s.Leases != 0 || granted != s.Returned+s.Expired || s.Returned < uint64(returnedTrue.Load()) || granted < uint64(len(uses)) {
		t.Errorf("after the run: %+v, %d granted, %d leases used, %d returns accepted: want none outstanding, granted = returned + expired ≥ used",
			s, granted, len(uses), returnedTrue.Load())
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// peakOverlap is the most intervals that cover one instant.
func peakOverlap(uses []use) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, u := range uses {
		edges = append(edges, edge{u.from, 1}, edge{u.to, -1})
	}
	// Ends before starts at the same instant: an interval is half-open.
	slices.SortFunc(edges, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.delta - y.delta
	})
	peak, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}
