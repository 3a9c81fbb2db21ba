package broker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds the pods' side of offers: an Offering is one pod's Offer
// stream as the Broker sees it, the asks sent on it and its answers. The
// borrow's side, which asks, is in offer_borrow.go.

// ErrUnknownGate is matched (errors.Is) by the error of an offer of a gate
// the Broker holds no reserve for.
var ErrUnknownGate = errors.New("broker: unknown gate")

// ErrOfferEnded is matched (errors.Is) by what Offer returns once
// CloseOffers was called, and what Offering.Next returns once the offering
// is closed.
var ErrOfferEnded = errors.New("broker: offer ended")

// OfferAsk is what the Broker tells an offering pod: Ask, when not zero,
// asks for one permit for a borrower whose lease lasts TTL; Release, when
// not zero, ends the permit the pod granted to the ask of that id.
type OfferAsk struct {
	Ask     uint64
	TTL     time.Duration
	Release uint64
}

// Offering is one pod's offer of its gate's idle permits: the Offer stream
// as the Broker sees it. The stream's reader tells it the pod's answers
// (Answer) and spare (SetSpare); its writer sends what Next returns; Close
// forgets the pod when the stream ends. Its methods are safe for
// concurrent use.
type Offering struct {
	b   *Broker
	p   *pool
	pod string
	// wake is signalled (capacity 1) when out grows; ended is closed by
	// Close.
	wake  chan struct{}
	ended chan struct{}

	// The rest is guarded by p.mu.
	closed bool
	// spare is what the pod last said it could lend.
	spare int
	// pending are the asks sent and not answered, by id: those a borrow
	// waits on, and those given up (ask.abandoned), kept until the pod
	// answers or the ask's ttl has passed, so that a late grant is
	// released.
	pending map[uint64]*ask
	// out are the messages for the pod, oldest first.
	out []OfferAsk
}

// ask is one ask for a permit, on behalf of one borrow.
type ask struct {
	id       uint64
	from     *Offering
	borrower string
	ticket   uint64 // the borrow's, or 0
	ttl      time.Duration
	// until is when the ask's ttl has passed, on the server's clock: the
	// pod, whose ttl runs from the ask's later arrival, needs nothing from
	// the server after that.
	until time.Time
	// done is closed when the ask is answered or given up.
	done chan struct{}
	// answered and abandoned say which, guarded by pool.mu; lease is the
	// lease a grant in time made.
	answered, abandoned bool
	lease               *lease
}

// asker is a borrow with a ticket while it asks offering pods: a Return
// by its ticket withdraws it, and gives up the ask it waits on.
type asker struct {
	withdrawn bool // guarded by pool.mu
	current   *ask // guarded by pool.mu; nil between asks
}

// offerCounts counts the answers to asks, by outcome: granted, refused,
// and timedOut for an ask the borrow stopped waiting on without an answer
// (its ask timeout, its context, its withdrawal or the stream's end).
type offerCounts struct {
	granted, refused, timedOut uint64
}

// Offer registers pod as offering the idle permits of its own gate, with
// spare the permits it could lend now: the first message of its Offer
// stream. The gate must be one the Broker holds a reserve for
// (ErrUnknownGate otherwise); a missing gate or pod matches ErrInvalid.
// The caller closes the Offering when the stream ends.
func (b *Broker) Offer(gate, pod string, spare int) (*Offering, error) {
	var problems []string
	if gate == "" {
		problems = append(problems, "gate: must not be empty")
	}
	if pod == "" {
		problems = append(problems, "pod: must not be empty")
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	// b.mu is held while the offering joins its pool, so that CloseOffers,
	// which sets offersClosed under it, finds the offering when it sweeps.
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.offersClosed {
		return nil, fmt.Errorf("%w: the server is shutting down", ErrOfferEnded)
	}
	p := b.pools[gate]
	if p == nil {
		return nil, fmt.Errorf("%w: gate: no reserve for gate %q here", ErrUnknownGate, gate)
	}
	o := &Offering{b: b, p: p, pod: pod, wake: make(chan struct{}, 1), ended: make(chan struct{}),
		spare: max(spare, 0), pending: map[uint64]*ask{}}
	p.mu.Lock()
	p.offerings[o] = struct{}{}
	p.mu.Unlock()
	return o, nil
}

// CloseOffers closes every Offering and refuses new ones, for a server
// that shuts down: its Offer streams end, and the pods offer to another
// replica. The leases lent from offered permits run on.
func (b *Broker) CloseOffers() {
	b.mu.Lock()
	b.offersClosed = true
	b.mu.Unlock()
	b.eachPool(func(p *pool) {
		for o := range p.offerings {
			o.closeLocked()
		}
	})
}

// Pod is the offering pod's name.
func (o *Offering) Pod() string { return o.pod }

// Next returns the next message for the pod, waiting for one. It returns
// an error matching ErrOfferEnded once the offering is closed, or ctx.Err().
func (o *Offering) Next(ctx context.Context) (OfferAsk, error) {
	for {
		o.p.mu.Lock()
		switch {
		case o.closed:
			o.p.mu.Unlock()
			return OfferAsk{}, ErrOfferEnded
		case len(o.out) > 0:
			m := o.out[0]
			o.out[0] = OfferAsk{}
			o.out = o.out[1:]
			o.p.mu.Unlock()
			return m, nil
		}
		o.p.mu.Unlock()
		select {
		case <-o.wake:
		case <-o.ended:
		case <-ctx.Done():
			return OfferAsk{}, ctx.Err()
		}
	}
}

// SetSpare records the permits the pod says it could lend now; a negative
// count is 0.
func (o *Offering) SetSpare(spare int) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	o.spare = max(spare, 0)
}

// Answer records the pod's answer to the ask of that id, and its spare.
// A grant in time becomes the borrow's lease; a grant for an ask the
// borrow gave up is released at once, since nobody will return it. An
// answer to an ask the offering does not know (answered before, past its
// ttl, never sent) is ignored.
func (o *Offering) Answer(id uint64, granted bool, spare int) {
	p := o.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if o.closed {
		return
	}
	o.spare = max(spare, 0)
	a := o.pending[id]
	if a == nil {
		return
	}
	delete(o.pending, id)
	if a.abandoned {
		if granted {
			o.sendLocked(OfferAsk{Release: id})
		}
		return
	}
	a.answered = true
	if granted {
		a.lease = p.grantOfferedLocked(a, o.b.clock.Now())
		p.offers.granted++
	} else {
		p.offers.refused++
	}
	close(a.done)
}

// Close forgets the pod: the stream ended. Its asks still waited on are
// given up (their borrows go on to the next pod); the leases lent from its
// permits run on, and the pod releases those permits itself by their
// asks' ttl.
func (o *Offering) Close() {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	o.closeLocked()
}

func (o *Offering) closeLocked() {
	if o.closed {
		return
	}
	o.closed = true
	delete(o.p.offerings, o)
	for _, a := range o.pending {
		o.p.abandonLocked(a)
	}
	clear(o.pending)
	o.out = nil
	close(o.ended)
}

// sendLocked queues m for the pod; a closed offering sends nothing.
func (o *Offering) sendLocked(m OfferAsk) {
	if o.closed {
		return
	}
	o.out = append(o.out, m)
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// askLocked sends the pod an ask for one permit for r's borrow, whose lease
// lasts ttl.
func (o *Offering) askLocked(borrower string, ticket uint64, ttl time.Duration, now time.Time) *ask {
	a := &ask{id: o.b.askIDs.Add(1), from: o, borrower: borrower, ticket: ticket, ttl: ttl,
		until: now.Add(ttl), done: make(chan struct{})}
	o.pending[a.id] = a
	o.sendLocked(OfferAsk{Ask: a.id, TTL: ttl})
	return a
}

// abandonLocked gives up a on behalf of its borrow, unless it was
// answered: a grant that comes later is released at once.
func (p *pool) abandonLocked(a *ask) {
	if a.answered || a.abandoned {
		return
	}
	a.abandoned = true
	p.offers.timedOut++
	close(a.done)
}

// grantOfferedLocked makes the lease of an ask a pod granted: a lease like
// any other to its borrower, lasting the ask's ttl from now, but not of
// the reserve.
func (p *pool) grantOfferedLocked(a *ask, now time.Time) *lease {
	l := &lease{id: p.newLeaseIDLocked(), ticket: a.ticket, pod: a.borrower, expires: now.Add(a.ttl), from: a.from, ask: a.id}
	p.offered[l.id] = l
	if a.ticket != 0 {
		p.ticketed[a.ticket] = l
	}
	heap.Push(&p.offeredExpiry, l)
	p.tallyLocked(a.borrower, now).granted++
	return l
}

// forgetAsksLocked drops the given-up asks whose ttl has passed by now: a
// grant for one needs no release any more, and a pod that never answers
// does not grow the server's memory.
func (p *pool) forgetAsksLocked(now time.Time) {
	for o := range p.offerings {
		for id, a := range o.pending {
			if a.abandoned && !now.Before(a.until) {
				delete(o.pending, id)
			}
		}
	}
}

// offeringPodsLocked is the number of pods with an Offer stream open: a
// pod whose old stream is not yet known to be broken counts once.
func (p *pool) offeringPodsLocked() int {
	pods := make(map[string]struct{}, len(p.offerings))
	for o := range p.offerings {
		pods[o.pod] = struct{}{}
	}
	return len(pods)
}
