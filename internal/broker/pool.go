package broker

import (
	"container/heap"
	"container/list"
	"math/rand/v2"
	"sync"
	"time"
)

// pool is one gate's slice of the reserve: its capacity in force, the
// leases outstanding, the borrows waiting, and the counts per pod.
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
	// onGrant, when set (by tests), is called under mu after every grant
	// with the leases outstanding and the capacity in force.
	onGrant func(leases, capacity int)
}

// lease is one permit lent.
type lease struct {
	id      uint64
	pod     string
	expires time.Time
	index   int // in pool.expiry
}

// waiter is a borrow waiting for a permit. Once granted it holds its lease
// and ready is closed.
type waiter struct {
	pod   string
	ttl   time.Duration
	ready chan struct{}
	lease *lease // guarded by pool.mu; set when granted
}

// podTally is what one pod asked of one gate.
type podTally struct {
	granted, refused uint64
	last             time.Time
}

func newPool(gate string) *pool {
	return &pool{gate: gate, leases: map[uint64]*lease{}, pods: map[string]*podTally{}}
}

// freeLocked reports whether a lease may be granted now: fewer leases
// outstanding than the capacity in force.
func (p *pool) freeLocked() bool { return len(p.leases) < p.capacity }

// grantLocked lends one permit to pod until now + ttl. The lease's id is
// random, so that a pod cannot return another's lease by guessing it (and
// so free a permit whose call still runs).
func (p *pool) grantLocked(pod string, now time.Time, ttl time.Duration) *lease {
	id := rand.Uint64()
	for p.leases[id] != nil || id == 0 {
		id = rand.Uint64()
	}
	l := &lease{id: id, pod: pod, expires: now.Add(ttl)}
	p.leases[id] = l
	heap.Push(&p.expiry, l)
	p.tallyLocked(pod, now).granted++
	if p.onGrant != nil {
		p.onGrant(len(p.leases), p.capacity)
	}
	return l
}

// endLocked takes l out of the leases, its permit free again.
func (p *pool) endLocked(l *lease) {
	delete(p.leases, l.id)
	heap.Remove(&p.expiry, l.index)
}

// expireLocked ends the leases whose time is up by now.
func (p *pool) expireLocked(now time.Time) {
	for len(p.expiry) > 0 && !p.expiry[0].expires.After(now) {
		p.endLocked(p.expiry[0])
		p.expired++
	}
}

// dispatchLocked lends the permits free to the borrows waiting, first come
// first served.
func (p *pool) dispatchLocked(now time.Time) {
	for p.freeLocked() && p.waiting.Len() > 0 {
		w := p.waiting.Remove(p.waiting.Front()).(*waiter)
		w.lease = p.grantLocked(w.pod, now, w.ttl)
		close(w.ready)
	}
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
