package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// simPod is an offering pod of the stress test: a few permits of its own,
// lent on the Broker's asks while it has one free, each held until the
// server releases it or its ttl has passed since the ask arrived. It
// answers some asks late and drops its stream at random (opening a new
// one), never letting a permit go early for that.
type simPod struct {
	name    string
	permits int
	b       *broker.Broker
	violate func(string)

	mu      sync.Mutex
	free    int                  // guarded by mu
	current *broker.Offering     // guarded by mu
	grants  map[uint64]*simGrant // guarded by mu; by ask id, every grant
}

// simGrant is one permit a simPod lent.
type simGrant struct {
	on       *broker.Offering // the stream the ask came on
	from     time.Time        // when the pod lent it
	until    time.Time        // the ask's arrival + ttl
	end      time.Time        // when the pod let it go
	releases int              // releases received
	expired  bool             // let go at its ttl
}

// lentLocked checks the pod's count of permits: never more lent than it
// has, never more free.
func (s *simPod) lentLocked() {
	if s.free < 0 || s.free > s.permits {
		s.violate(fmt.Sprintf("%s has %d of its %d permits free", s.name, s.free, s.permits))
	}
}

// run offers until ctx ends, over one stream after another.
func (s *simPod) run(ctx context.Context, seed uint64, wg *sync.WaitGroup) {
	r := rand.New(rand.NewPCG(seed, 5))
	for ctx.Err() == nil {
		s.mu.Lock()
		o, err := s.b.Offer("g", s.name, s.free)
		s.current = o
		s.mu.Unlock()
		if err != nil {
			s.violate(fmt.Sprintf("%s's offer: %v", s.name, err))
			return
		}
		s.serve(ctx, o, r, wg)
		o.Close()
		time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
	}
}

// serve reads one stream until it ends, ctx ends, or the pod drops it.
func (s *simPod) serve(ctx context.Context, o *broker.Offering, r *rand.Rand, wg *sync.WaitGroup) {
	for {
		m, err := o.Next(ctx)
		if err != nil {
			return
		}
		arrived := time.Now()
		if m.Release != 0 {
			s.release(m.Release)
		}
		if m.Ask == 0 {
			continue
		}
		switch r.IntN(20) {
		case 0: // the stream breaks before the answer
			return
		case 1, 2, 3: // a late answer, past the ask timeout
			delay := time.Duration(1+r.IntN(4)) * time.Millisecond
			wg.Go(func() {
				time.Sleep(delay)
				s.answer(o, m, arrived, false)
			})
		case 4, 5: // a call of its own waits: a refusal, and no spare for a while
			s.answer(o, m, arrived, true)
			wg.Go(func() {
				time.Sleep(time.Millisecond)
				s.mu.Lock()
				o.SetSpare(s.free)
				s.mu.Unlock()
			})
		default:
			s.answer(o, m, arrived, false)
		}
	}
}

// answer lends a permit for the ask m if one is free, unless busy (a call
// of its own waits).
func (s *simPod) answer(o *broker.Offering, m broker.OfferAsk, arrived time.Time, busy bool) {
	s.mu.Lock()
	granted := s.free > 0 && !busy
	if granted {
		s.free--
		s.lentLocked()
		g := &simGrant{on: o, from: time.Now(), until: arrived.Add(m.TTL)}
		if s.grants[m.Ask] != nil {
			s.violate(fmt.Sprintf("%s was asked twice with id %d", s.name, m.Ask))
		}
		s.grants[m.Ask] = g
		time.AfterFunc(time.Until(g.until), func() { s.expire(g) })
	}
	spare := s.free
	if busy {
		spare = 0
	}
	s.mu.Unlock()
	o.Answer(m.Ask, granted, spare)
}

// release ends the permit lent for ask id at the server's word.
func (s *simPod) release(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[id]
	switch {
	case g == nil:
		s.violate(fmt.Sprintf("%s was told to release ask %d, which it never granted", s.name, id))
		return
	case g.releases > 0:
		s.violate(fmt.Sprintf("%s was told to release ask %d twice", s.name, id))
	}
	g.releases++
	if g.end.IsZero() {
		g.end = time.Now()
		s.free++
		s.lentLocked()
		s.current.SetSpare(s.free)
	}
}

// expire lets go of g at its ttl, if it was not released before.
func (s *simPod) expire(g *simGrant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.end.IsZero() {
		g.end = time.Now()
		g.expired = true
		s.free++
		s.lentLocked()
		s.current.SetSpare(s.free)
	}
}

// offeredUse is a borrower's use of an offered lease.
type offeredUse struct {
	ask      uint64
	from, to time.Time
}

// TestOfferStress is the adversary of offers: borrowers that hold, return,
// lose their returns and give up on answers (taking the borrow back by
// ticket), on a reserve whose capacity moves, with pods offering a few
// permits each that refuse when they have none, answer late and drop
// their streams. It checks at every grant that the reserve's leases are
// within the capacity in force; that no pod has more permits lent than it
// has and none is released twice or without a grant; that no borrower
// uses a pod's permit the pod no longer holds; that no two borrowers used
// more permits of the reserve at once than its largest capacity; that
// every offered lease its borrower returned was released at its pod while
// the pod's stream lasted; and at the end that nothing is left: no lease,
// no ask pending, every pod's permits back.
func TestOfferStress(t *testing.T) {
	const (
		maxCapacity = 4
		borrowers   = 16
		pods        = 5
		permits     = 2
		run         = 1500 * time.Millisecond
		learning    = 300 * time.Millisecond
	)
	b, err := broker.New(broker.Options{MaxLease: learning, Margin: 20 * time.Millisecond, MaxWait: 20 * time.Millisecond,
		OfferAskTimeout: time.Millisecond, OfferAsks: 2})
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
			violate("a grant took the reserve's leases above the capacity in force")
		}
	})

	ctx, stop := context.WithTimeout(context.Background(), run)
	defer stop()
	// The pods outlive the borrowers, so that the releases of the last
	// returns reach them.
	podsCtx, stopPods := context.WithCancel(context.Background())
	defer stopPods()
	var wg, podsWG sync.WaitGroup
	sims := make([]*simPod, pods)
	for i := range sims {
		sims[i] = &simPod{name: fmt.Sprintf("pod-%d", i), permits: permits, free: permits, b: b, violate: violate, grants: map[uint64]*simGrant{}}
		podsWG.Go(func() { sims[i].run(podsCtx, uint64(i), &podsWG) })
	}

	var mu sync.Mutex
	var reserveUses []use
	var offeredUses []offeredUse
	returned := map[uint64]bool{} // asks whose lease its borrower ended
	for i := range borrowers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 6))
			// Borrowers are the offering pods too: a pod is never lent its
			// own permit.
			pod := sims[i%pods].name
			for ctx.Err() == nil {
				hold := time.Duration(5+r.IntN(45)) * time.Millisecond
				asked := time.Now()
				ticket := uint64(i+1)<<40 | r.Uint64()>>24
				bctx, cancel := ctx, context.CancelFunc(func() {})
				if i%3 == 0 {
					bctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(5))*time.Millisecond)
				}
				l, err := b.Borrow(bctx, broker.Request{Gate: "g", Pod: pod, Hold: hold, Wait: time.Duration(r.IntN(20)) * time.Millisecond, Ticket: ticket})
				gaveUp := bctx.Err() != nil && ctx.Err() == nil
				cancel()
				if gaveUp {
					ask, _ := b.LenderOf("g", l.ID)
					delay := time.Duration(r.IntN(3)) * time.Millisecond
					wg.Go(func() {
						time.Sleep(delay)
						if b.Withdraw("g", ticket) && err == nil && ask != 0 {
							mu.Lock()
							returned[ask] = true
							mu.Unlock()
						}
					})
					continue // an answer after giving up is not used
				}
				var refusal *broker.Refusal
				switch {
				case errors.As(err, &refusal):
					if refusal.Reason == reservev1.Reason_REASON_LEARNING {
						time.Sleep(min(refusal.RetryAfter, 20*time.Millisecond))
					}
					continue
				case err != nil:
					continue
				}
				got := time.Now()
				ask, live := b.LenderOf("g", l.ID)
				deadline := asked.Add(hold)
				if !live || !got.Before(deadline) {
					if b.Return("g", l.Incarnation, l.ID) && ask != 0 {
						mu.Lock()
						returned[ask] = true
						mu.Unlock()
					}
					continue
				}
				time.Sleep(min(time.Duration(r.IntN(int(hold))), time.Until(deadline)))
				lost := r.IntN(5) == 0
				to := asked.Add(l.TTL) // a lost return: the lease runs out
				if !lost {
					to = minTime(time.Now(), to)
				}
				mu.Lock()
				if ask != 0 {
					offeredUses = append(offeredUses, offeredUse{ask, got, to})
				} else {
					reserveUses = append(reserveUses, use{got, to})
				}
				mu.Unlock()
				if !lost && b.Return("g", l.Incarnation, l.ID) && ask != 0 {
					mu.Lock()
					returned[ask] = true
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() { // the reserve's capacity moves, shrinking by attrition
		r := rand.New(rand.NewPCG(99, 7))
		for ctx.Err() == nil {
			_ = b.SetCapacity("g", r.IntN(maxCapacity+1))
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
		}
	})
	wg.Go(func() { _ = b.Run(ctx, 5*time.Millisecond) })
	wg.Wait()

	if n := violations.Load(); n > 0 {
		t.Fatalf("%d violations; the first: %s", n, firstViolation.Load())
	}
	if peak := peakOverlap(reserveUses); peak > maxCapacity {
		t.Errorf("borrowers used %d permits of the reserve at once, above its largest capacity %d", peak, maxCapacity)
	}
	grantOf := func(ask uint64) (*simPod, *simGrant) {
		for _, s := range sims {
			s.mu.Lock()
			g := s.grants[ask]
			s.mu.Unlock()
			if g != nil {
				return s, g
			}
		}
		return nil, nil
	}
	for _, u := range offeredUses {
		s, g := grantOf(u.ask)
		if g == nil {
			t.Fatalf("a borrower was lent ask %d, which no pod granted", u.ask)
		}
		s.mu.Lock()
		end := g.end
		s.mu.Unlock()
		if u.from.Before(g.from) || (!end.IsZero() && end.Before(u.to)) || g.until.Before(u.to) {
			t.Errorf("a borrower used %s's permit of ask %d from %s to %s; the pod held it from %s to %s (its ttl %s)",
				s.name, u.ask, u.from.Format(time.StampMicro), u.to.Format(time.StampMicro),
				g.from.Format(time.StampMicro), end.Format(time.StampMicro), g.until.Format(time.StampMicro))
		}
	}
	// Every offered lease its borrower ended was released at its pod,
	// unless the pod's stream ended first.
	waitFor(t, "the pods have every release of a lease returned", func() bool {
		for ask := range returned {
			s, g := grantOf(ask)
			s.mu.Lock()
			pending := g.on == s.current && g.releases == 0 && !g.expired
			s.mu.Unlock()
			if pending {
				return false
			}
		}
		return true
	})
	if len(offeredUses) < 20 || len(reserveUses) < 20 {
		t.Errorf("only %d offered and %d reserve leases used in %s: the test checked little", len(offeredUses), len(reserveUses), run)
	}

	// Nothing left: once every ttl has passed and the streams are closed,
	// no lease or ask is outstanding and every pod has its permits.
	stopPods()
	podsWG.Wait()
	time.Sleep(learning)
	b.Expire()
	s := stats(t, b)
	var granted uint64
	for _, c := range b.Borrowers() {
		granted += c.Granted
	}
	if s.Leases != 0 || s.OfferedLeases != 0 || s.OfferingPods != 0 || b.PendingAsks("g") != 0 || granted != s.Returned+s.Expired {
		t.Errorf("after the run: %+v, %d granted, %d asks pending: want nothing outstanding, granted = returned + expired", s, granted, b.PendingAsks("g"))
	}
	if s.OffersGranted == 0 || s.OffersRefused == 0 || s.OffersTimedOut == 0 {
		t.Errorf("after the run: %+v: want offers granted, refused and timed out", s)
	}
	for _, sim := range sims {
		sim.mu.Lock()
		if sim.free != sim.permits {
			t.Errorf("%s has %d of its %d permits free after every ttl", sim.name, sim.free, sim.permits)
		}
		sim.mu.Unlock()
	}
	if n := violations.Load(); n > 0 {
		t.Fatalf("%d violations; the first: %s", n, firstViolation.Load())
	}
}
