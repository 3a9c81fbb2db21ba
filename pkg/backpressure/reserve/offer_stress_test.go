package reserve_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
)

// stressAsk is one ask the stress server sent.
type stressAsk struct {
	sentAt time.Time
	// releaseSentAt is when the first release naming it was sent; zero
	// without one.
	releaseSentAt time.Time
	granted       bool
}

// TestOfferStress: many asks, releases (pipelined behind their ask,
// repeated, of ids never asked), streams broken by the server, and the
// pod's own calls taking and giving back permits. Every permit lent is
// released exactly once, never before the server released it or its ttl
// passed since the ask, and never more permits are out than the gate
// holds.
func TestOfferStress(t *testing.T) {
	const (
		permits = 6
		streams = 60
	)
	var (
		mu   sync.Mutex
		asks = map[time.Duration]*stressAsk{} // by ttl, unique per ask
		seq  atomic.Int64
	)
	served := atomic.Int32{}
	allServed := make(chan struct{})
	s := newOfferServer()
	s.handle = func(c *offerConn) error {
		defer func() {
			if served.Add(1) == streams {
				close(allServed)
			}
		}()
		rng := rand.New(rand.NewPCG(uint64(seq.Add(1)), 1))
		var granted []uint64
		var next uint64
		// answer reads the pod's answer to ask id; false when the stream
		// broke.
		answer := func(id uint64, ttl time.Duration) bool {
			for m := range c.msgs {
				if m.GetAsk() == 0 {
					continue
				}
				if m.GetAsk() != id {
					t.Errorf("answer to ask %d, want one to ask %d", m.GetAsk(), id)
					return false
				}
				if m.GetGranted() {
					granted = append(granted, id)
					mu.Lock()
					asks[ttl].granted = true
					mu.Unlock()
				}
				return true
			}
			return false
		}
		release := func(id uint64, ttl time.Duration) error {
			if ttl != 0 {
				mu.Lock()
				if a := asks[ttl]; a.releaseSentAt.IsZero() {
					a.releaseSentAt = time.Now()
				}
				mu.Unlock()
			}
			return c.stream.Send(&reservev1.OfferAsk{Release: id})
		}
		ttls := map[uint64]time.Duration{} // by this stream's ask id
		for range 1 + rng.IntN(40) {
			switch p := rng.IntN(100); {
			case p < 65: // an ask, sometimes released at once behind it
				next++
				id := next
				ttl := time.Duration(1+rng.IntN(20))*time.Millisecond + time.Duration(seq.Add(1))*time.Nanosecond
				ttls[id] = ttl
				mu.Lock()
				asks[ttl] = &stressAsk{sentAt: time.Now()}
				mu.Unlock()
				if err := c.stream.Send(&reservev1.OfferAsk{Ask: id, Ttl: durationpb.New(ttl)}); err != nil {
					return nil
				}
				if p < 10 {
					if err := release(id, ttl); err != nil {
						return nil
					}
				}
				if !answer(id, ttl) {
					return nil
				}
			case p < 90 && len(granted) > 0: // a release, sometimes twice
				i := rng.IntN(len(granted))
				id := granted[i]
				granted = append(granted[:i], granted[i+1:]...)
				for range 1 + rng.IntN(2) {
					if err := release(id, ttls[id]); err != nil {
						return nil
					}
				}
			case p < 95: // a release of an id never asked
				if err := release(next+1000, 0); err != nil {
					return nil
				}
			default: // the stream broken
				if rng.IntN(2) == 0 {
					return status.Error(codes.Unavailable, "going away")
				}
				return nil
			}
		}
		return nil
	}
	c := startOffers(t, s, reserve.Options{Backoff: time.Millisecond, SpareInterval: time.Millisecond})
	o := newOfferer(permits)
	stop := runOffer(t, c, "g", o)

	// The pod's own calls, taking and giving back permits meanwhile.
	ownDone := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(ownDone)
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-quit:
				return
			default:
			}
			n := 1 + rng.IntN(2)
			if o.take(n) {
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				o.give(n)
			}
			time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		}
	}()
	select {
	case <-allServed:
	case <-time.After(30 * time.Second):
		t.Errorf("only %d of %d streams served within 30s", served.Load(), streams)
	}
	close(quit)
	<-ownDone
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Offer returned %v, want context.Canceled", err)
	}
	eventually(t, "every permit lent is released", o.allReleased)
	o.check(t)

	mu.Lock()
	defer mu.Unlock()
	ps := o.permits()
	grants := 0
	for _, a := range asks {
		if a.granted {
			grants++
		}
	}
	if grants == 0 || len(ps) < grants {
		t.Errorf("%d permits lent for %d asks granted, want at least one, and one for each", len(ps), grants)
	}
	for _, p := range ps {
		a, ok := asks[p.ttl]
		if !ok {
			t.Errorf("a permit lent for %s, which no ask named", p.ttl)
			continue
		}
		if p.releases != 1 {
			t.Errorf("the permit of the ask for %s released %d times", p.ttl, p.releases)
		}
		// Never before the server released it or its ttl had passed
		// since the ask.
		earliest := a.sentAt.Add(p.ttl)
		if !a.releaseSentAt.IsZero() && a.releaseSentAt.Before(earliest) {
			earliest = a.releaseSentAt
		}
		if p.releasedAt.Before(earliest) {
			t.Errorf("the permit of the ask for %s released %s early", p.ttl, earliest.Sub(p.releasedAt))
		}
	}
	t.Logf("%d streams, %d asks, %d permits lent", served.Load(), len(asks), len(ps))
}
