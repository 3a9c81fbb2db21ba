package broker

import (
	"container/heap"
	"container/list"
	"math/rand/v2"
	"sync"
	"time"
)

// pool is one gate's slice of the reserve: its capacity in force, the
// leases outstanding, the borrows waiting, and the counts per pod; and the
// gate's offering pods with the leases lent from their permits (offer.go).
type pool struct {
	gate string

	mu       sync.Mutex
	capacity int                  // guarded by mu
	leases   map[uint64]*lease    // guarded by mu
	expiry   expiryHeap           // guarded by mu; the leases by when they end
	waiting  list.List            // guarded by mu; of *waiter, first come first
	pods     map[string]*podTally // guarded by mu
	returned uint64               // guarded by mu
	expired  uint64               // guarded by mu
	// ticketed are the leases whose borrow carried a ticket, and
	// ticketWaiting the borrows with one still waiting, by ticket: a
	// Return by ticket ends or withdraws them.
	ticketed      map[uint64]*lease  // guarded by mu
	ticketWaiting map[uint64]*waiter // guarded by mu
	// withdrawn are the tickets returned before their borrow arrived, and
	// until when a borrow carrying one is refused; withdrawnOrder holds
	// them oldest first, so that they are forgotten in order and at most
	// maxWithdrawn are kept.
	withdrawn      map[uint64]time.Time // guarded by mu
	withdrawnOrder []uint64             // guarded by mu
	// offerings are the pods' Offer streams open on this gate; offered
	// the leases lent from their permits, by id, and offeredExpiry the
	// same by when they end. An offered lease is not a permit of the
	// reserve: it is kept apart from leases and never counted against
	// the capacity.
	offerings     map[*Offering]struct{} // guarded by mu
	offered       map[uint64]*lease      // guarded by mu
	offeredExpiry expiryHeap             // guarded by mu
	// asking are the borrows with a ticket that are asking offering
	// pods, by ticket, so that a Return by ticket takes them back too.
	asking map[uint64]*asker // guarded by mu
	// offers counts the pods' answers to asks, by outcome.
	offers offerCounts // guarded by mu
	// onGrant, when set (by tests), is called under mu after every grant
	// with the leases outstanding and the capacity in force.
	onGrant func(leases, capacity int)
}

// lease is one permit lent: of the reserve, or, when from is set, one of
// an offering pod's own permits.
type lease struct {
	id      uint64
	ticket  uint64 // the borrow's, or 0
	pod     string
	expires time.Time
	index   int // in pool.expiry, or in pool.offeredExpiry when from is set
	// from is the offering whose pod lent the permit, and ask the ask it
	// granted: ending the lease early releases it there.
	from *Offering
	ask  uint64
}

// waiter is a borrow waiting for a permit. Once granted it holds its lease
// and ready is closed.
type waiter struct {
	pod    string
	ticket uint64 // the borrow's, or 0
	ttl    time.Duration
	ready  chan struct{}
	elem   *list.Element // in pool.waiting
	lease  *lease        // guarded by pool.mu; set when granted
	// withdrawn is set, guarded by pool.mu, when a Return by ticket took
	// the borrow back while it waited; ready is then closed too.
	withdrawn bool
}

// maxWithdrawn bounds the tickets a pool remembers as withdrawn before
// their borrow arrived: a borrower can make the server remember no more
// than that, whatever tickets it returns.
const maxWithdrawn = 4096

// podTally is what one pod asked of one gate.
type podTally struct {
	granted, refused uint64
	last             time.Time
}

func newPool(gate string) *pool {
	return &pool{gate: gate, leases: map[uint64]*lease{}, pods: map[string]*podTally{},
		ticketed: map[uint64]*lease{}, ticketWaiting: map[uint64]*waiter{}, withdrawn: map[uint64]time.Time{},
		offerings: map[*Offering]struct{}{}, offered: map[uint64]*lease{}, asking: map[uint64]*asker{}}
}

// freeLocked reports whether a lease may be granted now: fewer leases
// outstanding than the capacity in force.
func (p *pool) freeLocked() bool { return len(p.leases) < p.capacity }

// grantLocked lends one permit to pod until now + ttl. The lease's id is
// random, so that a pod cannot return another's lease by guessing it (and
// so free a permit whose call still runs).
func (p *pool) grantLocked(pod string, ticket uint64, now time.Time, ttl time.Duration) *lease {
	id := p.newLeaseIDLocked()
	l := &lease{id: id, ticket: ticket, pod: pod, expires: now.Add(ttl)}
	p.leases[id] = l
	if ticket != 0 {
		p.ticketed[ticket] = l
	}
	heap.Push(&p.expiry, l)
	p.tallyLocked(pod, now).granted++
	if p.onGrant != nil {
		p.onGrant(len(p.leases), p.capacity)
	}
	return l
}

// newLeaseIDLocked draws the id of a new lease, of either kind: one
// Return names both.
func (p *pool) newLeaseIDLocked() uint64 {
	id := rand.Uint64()
	for p.leases[id] != nil || p.offered[id] != nil || id == 0 {
		id = rand.Uint64()
	}
	return id
}

// leaseLocked is the lease outstanding with id, of either kind, or nil.
func (p *pool) leaseLocked(id uint64) *lease {
	if l := p.leases[id]; l != nil {
		return l
	}
	return p.offered[id]
}

// endLocked takes l out of the leases, its permit free again.
func (p *pool) endLocked(l *lease) {
	if l.ticket != 0 && p.ticketed[l.ticket] == l {
		delete(p.ticketed, l.ticket)
	}
	if l.from != nil {
		delete(p.offered, l.id)
		heap.Remove(&p.offeredExpiry, l.index)
		return
	}
	delete(p.leases, l.id)
	heap.Remove(&p.expiry, l.index)
}

// returnLocked ends l before its time, given back by its borrower (or on
// its behalf). An offered lease's permit is released at its pod, which
// would otherwise hold it idle until the ask's ttl.
func (p *pool) returnLocked(l *lease) {
	p.endLocked(l)
	p.returned++
	if l.from != nil {
		l.from.sendLocked(OfferAsk{Release: l.ask})
	}
}

// expireLocked ends the leases whose time is up by now. An offered lease
// that expires is only forgotten: its pod has let its permit go by then
// (see Offering).
func (p *pool) expireLocked(now time.Time) {
	for _, h := range []*expiryHeap{&p.expiry, &p.offeredExpiry} {
		for len(*h) > 0 && !(*h)[0].expires.After(now) {
			p.endLocked((*h)[0])
			p.expired++
		}
	}
}

// dispatchLocked lends the permits free to the borrows waiting, first come
// first served.
func (p *pool) dispatchLocked(now time.Time) {
	for p.freeLocked() && p.waiting.Len() > 0 {
		w := p.waiting.Front().Value.(*waiter)
		p.unqueueLocked(w)
		w.lease = p.grantLocked(w.pod, w.ticket, now, w.ttl)
		close(w.ready)
	}
}

// queueLocked puts w at the end of the borrows waiting.
func (p *pool) queueLocked(w *waiter) {
	w.elem = p.waiting.PushBack(w)
	if w.ticket != 0 {
		p.ticketWaiting[w.ticket] = w
	}
}

// unqueueLocked takes w out of the borrows waiting, if it is there.
func (p *pool) unqueueLocked(w *waiter) {
	p.waiting.Remove(w.elem) // a no-op when w is no longer in the list
	if w.ticket != 0 && p.ticketWaiting[w.ticket] == w {
		delete(p.ticketWaiting, w.ticket)
	}
}

// withdrawLocked takes back the borrow with ticket: it ends its lease, or
// withdraws it while it waits or asks offering pods, or, when it has not arrived, remembers the
// ticket until until so that it is refused when it does. It reports
// whether a lease ended or a borrow was withdrawn. The caller lends a
// permit it freed to the borrows waiting.
func (p *pool) withdrawLocked(ticket uint64, now, until time.Time) bool {
	if l := p.ticketed[ticket]; l != nil {
		p.returnLocked(l)
		return true
	}
	if w := p.ticketWaiting[ticket]; w != nil {
		p.unqueueLocked(w)
		w.withdrawn = true
		close(w.ready)
		return true
	}
	if a := p.asking[ticket]; a != nil {
		a.withdrawn = true
		if a.current != nil {
			p.abandonLocked(a.current)
		}
		return true
	}
	p.forgetWithdrawnLocked(now)
	if _, ok := p.withdrawn[ticket]; !ok {
		if len(p.withdrawnOrder) >= maxWithdrawn {
			delete(p.withdrawn, p.withdrawnOrder[0])
			p.withdrawnOrder = p.withdrawnOrder[1:]
		}
		p.withdrawnOrder = append(p.withdrawnOrder, ticket)
	}
	p.withdrawn[ticket] = until
	return false
}

// isWithdrawnLocked reports whether ticket was returned before its borrow
// arrived, and forgets it: a ticket is used once.
func (p *pool) isWithdrawnLocked(ticket uint64, now time.Time) bool {
	if ticket == 0 {
		return false
	}
	until, ok := p.withdrawn[ticket]
	if !ok {
		return false
	}
	delete(p.withdrawn, ticket)
	return now.Before(until)
}

// forgetWithdrawnLocked forgets the withdrawn tickets remembered until
// before now, and those whose borrow came (no longer in withdrawn).
func (p *pool) forgetWithdrawnLocked(now time.Time) {
	i := 0
	for ; i < len(p.withdrawnOrder); i++ {
		until, ok := p.withdrawn[p.withdrawnOrder[i]]
		if ok && now.Before(until) {
			break
		}
		delete(p.withdrawn, p.withdrawnOrder[i])
	}
	p.withdrawnOrder = p.withdrawnOrder[i:]
}

func (p *pool) tallyLocked(pod string, now time.Time) *podTally {
	t := p.pods[pod]
	if t == nil {
		t = &podTally{}
		p.pods[pod] = t
	}
	t.last = now
	return t
}

// forgetLocked drops the counts of the pods that have not borrowed since
// before.
func (p *pool) forgetLocked(before time.Time) {
	for pod, t := range p.pods {
		if t.last.Before(before) {
			delete(p.pods, pod)
		}
	}
}

// expiryHeap orders leases by when they end, for container/heap.
type expiryHeap []*lease

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// Push adds a lease; container/heap calls it.
func (h *expiryHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}

// Pop takes the last lease; container/heap calls it.
func (h *expiryHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}
