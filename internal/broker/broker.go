package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
)

// Defaults of Options.
const (
	// DefaultMaxLease is long enough for the per-hop deadlines the operator
	// sizes for (seconds at most) and short enough that a restarted server
	// lends again soon.
	DefaultMaxLease = 10 * time.Second
	// DefaultMargin covers what outlives a call's deadline on the caller's
	// side: the release after the call returns, a transport that finishes
	// reading an answer.
	DefaultMargin = 100 * time.Millisecond
	// DefaultMaxWait bounds how long a borrow may wait, well above the
	// waiting rooms the plans size (tens of milliseconds).
	DefaultMaxWait = time.Second
	// DefaultPodRetention is how long a pod's counts outlive its last
	// borrow: several scrapes and several demand readings.
	DefaultPodRetention = 10 * time.Minute
	// DefaultOfferAskTimeout bounds one ask of an offering pod. A round
	// trip between pods is about 100µs and a pod answers from memory, so
	// an answer comes within it unless the pod or the network is stalled;
	// and three asks that all time out cost a borrow under a millisecond,
	// small beside the waiting rooms of tens of milliseconds it would
	// otherwise wait in.
	DefaultOfferAskTimeout = 300 * time.Microsecond
	// DefaultOfferAsks is the most offering pods one borrow asks: a pod
	// that refuses has usually lent its spare to another borrow since it
	// last said so, and the next may have too; past a few, the borrow does
	// better waiting for the reserve.
	DefaultOfferAsks = 3
)

// Options configure a Broker. Zero values take the defaults above.
type Options struct {
	// MaxLease is the longest lease; a new Broker lends nothing for that
	// long (see the package documentation, Restarts).
	MaxLease time.Duration
	// Margin is added to every hold.
	Margin time.Duration
	// MaxWait is the longest a borrow waits for a permit.
	MaxWait time.Duration
	// PodRetention is how long a pod's counts are kept after its last
	// borrow.
	PodRetention time.Duration
	// OfferAskTimeout is the longest a borrow waits for one offering pod's
	// answer before it asks the next (see the package documentation,
	// Offers).
	OfferAskTimeout time.Duration
	// OfferAsks is the most offering pods one borrow asks.
	OfferAsks int
	// Clock tells the time of leases and learning; nil means the real
	// clock. Waits use real timers.
	Clock clock.PassiveClock
	// Registerer registers the Broker's collector; nil registers nothing
	// (Collector returns it for the caller to register).
	Registerer prometheus.Registerer
}

// Request is one borrow.
type Request struct {
	// Gate and Pod name the reserve and the borrower.
	Gate, Pod string
	// Hold is the longest the caller will hold the permit.
	Hold time.Duration
	// Wait is how long the borrow may wait for a permit; 0 answers at once.
	Wait time.Duration
	// Ticket, when not zero, is the borrower's name for the borrow: Withdraw
	// with it takes the borrow back.
	Ticket uint64
}

// Lease is a permit lent: it must be returned with its Incarnation and ID,
// and ends on its own TTL after it was granted.
type Lease struct {
	Incarnation, ID uint64
	TTL             time.Duration
}

// Refusal is the error Borrow returns when it lends nothing.
type Refusal struct {
	Reason reservev1.Reason
	// RetryAfter, when positive, is how long asking again is useless.
	RetryAfter time.Duration
	Message    string
}

func (r *Refusal) Error() string { return "broker: " + r.Message }

// ErrInvalid is matched (errors.Is) by the error of a malformed request.
var ErrInvalid = errors.New("broker: invalid request")

// Broker lends the permits of the reserves it holds. See the package
// documentation for its guarantees. It is safe for concurrent use.
type Broker struct {
	opts          Options
	clock         clock.PassiveClock
	incarnation   uint64
	learningUntil time.Time
	refusals      refusalCounts
	// askIDs draws the ids of asks to offering pods, unique in this run.
	askIDs atomic.Uint64

	mu    sync.RWMutex
	pools map[string]*pool // guarded by mu
	// offersClosed is set by CloseOffers: no Offering is opened after it.
	offersClosed bool // guarded by mu
}

// New returns a Broker that starts learning now, with no gate.
func New(opts Options) (*Broker, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&opts.MaxLease, DefaultMaxLease)
	def(&opts.Margin, DefaultMargin)
	def(&opts.MaxWait, DefaultMaxWait)
	def(&opts.PodRetention, DefaultPodRetention)
	def(&opts.OfferAskTimeout, DefaultOfferAskTimeout)
	if opts.OfferAsks == 0 {
		opts.OfferAsks = DefaultOfferAsks
	}
	switch {
	case opts.MaxLease < 0 || opts.Margin < 0 || opts.MaxWait < 0 || opts.PodRetention < 0 || opts.OfferAskTimeout < 0:
		return nil, fmt.Errorf("broker: options: durations must not be negative: %+v", opts)
	case opts.Margin >= opts.MaxLease:
		return nil, fmt.Errorf("broker: margin %s must be below the longest lease %s", opts.Margin, opts.MaxLease)
	case opts.OfferAsks < 0:
		return nil, fmt.Errorf("broker: offer asks: must be at least 1, got %d", opts.OfferAsks)
	}
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	b := &Broker{
		opts:          opts,
		clock:         c,
		incarnation:   rand.Uint64(),
		learningUntil: c.Now().Add(opts.MaxLease),
		pools:         map[string]*pool{},
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(b.Collector()); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Incarnation names this run of the server in its leases.
func (b *Broker) Incarnation() uint64 { return b.incarnation }

// LearningUntil is when the Broker starts lending.
func (b *Broker) LearningUntil() time.Time { return b.learningUntil }

// SetCapacity puts capacity in force for gate, creating the gate if it is
// new. A larger capacity serves waiting borrows at once; a smaller one
// revokes nothing.
func (b *Broker) SetCapacity(gate string, capacity int) error {
	if gate == "" {
		return fmt.Errorf("%w: gate: must not be empty", ErrInvalid)
	}
	if capacity < 0 {
		return fmt.Errorf("%w: capacity of %s: must be at least 0, got %d", ErrInvalid, gate, capacity)
	}
	b.mu.Lock()
	p := b.pools[gate]
	if p == nil {
		p = newPool(gate)
		b.pools[gate] = p
	}
	b.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.capacity = capacity
	p.expireLocked(now)
	p.dispatchLocked(now)
	return nil
}

func (b *Broker) pool(gate string) *pool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.pools[gate]
}

func (r Request) validate() error {
	var problems []string
	if r.Gate == "" {
		problems = append(problems, "gate: must not be empty")
	}
	if r.Pod == "" {
		problems = append(problems, "pod: must not be empty")
	}
	if r.Hold <= 0 {
		problems = append(problems, fmt.Sprintf("hold: must be positive, got %s", r.Hold))
	}
	if r.Wait < 0 {
		problems = append(problems, fmt.Sprintf("wait: must not be negative, got %s", r.Wait))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// Borrow lends one permit of r.Gate. When the reserve has none free, it
// asks the gate's offering pods for one of theirs (see the package
// documentation, Offers), then waits for the reserve up to r.Wait (at most
// Options.MaxWait, less the time the asks took). It returns the lease, a
// *Refusal, an error matching ErrInvalid, or ctx.Err() when ctx ends while
// it asks or waits.
func (b *Broker) Borrow(ctx context.Context, r Request) (Lease, error) {
	started := time.Now() // waits are on real timers
	if err := r.validate(); err != nil {
		return Lease{}, err
	}
	p := b.pool(r.Gate)
	if p == nil {
		return Lease{}, b.refuse(reservev1.Reason_REASON_UNKNOWN_GATE, 0, "no reserve for gate %q here", r.Gate)
	}
	ttl := r.Hold + b.opts.Margin
	p.mu.Lock()
	// The time of a grant is read once the lock is held, as everywhere: a
	// time read before could precede the ask of a borrow that queued
	// meanwhile, and its lease would end before the borrower's own
	// reckoning of it (ask + ttl).
	now := b.clock.Now()
	switch {
	case now.Before(b.learningUntil):
		p.tallyLocked(r.Pod, now).refused++
		p.mu.Unlock()
		left := b.learningUntil.Sub(now)
		return Lease{}, b.refuse(reservev1.Reason_REASON_LEARNING, left, "started less than the longest lease (%s) ago: lending from %s on", b.opts.MaxLease, b.learningUntil.Format(time.RFC3339Nano))
	case ttl > b.opts.MaxLease:
		p.tallyLocked(r.Pod, now).refused++
		p.mu.Unlock()
		return Lease{}, b.refuse(reservev1.Reason_REASON_HOLD_TOO_LONG, 0, "hold %s plus margin %s exceeds the longest lease %s", r.Hold, b.opts.Margin, b.opts.MaxLease)
	}
	p.expireLocked(now)
	switch {
	case p.isWithdrawnLocked(r.Ticket, now):
		p.mu.Unlock()
		return Lease{}, b.withdrawn()
	case r.Ticket != 0 && (p.ticketed[r.Ticket] != nil || p.ticketWaiting[r.Ticket] != nil || p.asking[r.Ticket] != nil):
		// A ticket is used once: a Return could not tell two borrows
		// with the same one apart.
		p.mu.Unlock()
		return Lease{}, fmt.Errorf("%w: ticket %d: a borrow with it is outstanding", ErrInvalid, r.Ticket)
	case ctx.Err() != nil:
		// The borrower gave up before the server began: a lease now
		// would reach nobody.
		p.mu.Unlock()
		return Lease{}, ctx.Err()
	case p.freeLocked() && p.waiting.Len() == 0:
		l := p.grantLocked(r.Pod, r.Ticket, now, ttl)
		p.mu.Unlock()
		return b.leaseOf(l, ttl), nil
	}
	if l, answered, err := b.borrowOfferedLocked(ctx, p, r, ttl); answered {
		p.mu.Unlock()
		return l, err
	}
	now = b.clock.Now()
	wait := min(r.Wait, b.opts.MaxWait) - time.Since(started)
	if wait <= 0 {
		p.tallyLocked(r.Pod, now).refused++
		err := b.exhaustedLocked(p)
		p.mu.Unlock()
		return Lease{}, err
	}
	w := &waiter{pod: r.Pod, ticket: r.Ticket, ttl: ttl, ready: make(chan struct{})}
	p.queueLocked(w)
	p.mu.Unlock()
	return b.await(ctx, p, w, wait)
}

// await blocks until w is granted or withdrawn, its wait ends or ctx ends.
func (b *Broker) await(ctx context.Context, p *pool, w *waiter, wait time.Duration) (Lease, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ready:
	case <-timer.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.lease != nil {
		// A caller that gave up never sees the lease (granted as its
		// wait ended, or as it gave up): end it now rather than when it
		// expires.
		if ctx.Err() != nil {
			if p.leases[w.lease.id] == w.lease {
				p.returnLocked(w.lease)
				p.dispatchLocked(b.clock.Now())
			}
			return Lease{}, ctx.Err()
		}
		return b.leaseOf(w.lease, w.ttl), nil
	}
	p.unqueueLocked(w)
	if w.withdrawn {
		return Lease{}, b.withdrawn()
	}
	p.tallyLocked(w.pod, b.clock.Now()).refused++
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	return Lease{}, b.exhaustedLocked(p)
}

func (b *Broker) withdrawn() error {
	return b.refuse(reservev1.Reason_REASON_WITHDRAWN, 0, "withdrawn by its borrower before a permit was lent")
}

// exhaustedLocked is the refusal of a borrow p had no permit for; p.mu is
// held (the message reads the capacity in force).
func (b *Broker) exhaustedLocked(p *pool) error {
	return b.refuse(reservev1.Reason_REASON_EXHAUSTED, 0, "every permit of gate %q's reserve here is lent (%d)", p.gate, p.capacity)
}

func (b *Broker) leaseOf(l *lease, ttl time.Duration) Lease {
	return Lease{Incarnation: b.incarnation, ID: l.id, TTL: ttl}
}

func (b *Broker) refuse(reason reservev1.Reason, retryAfter time.Duration, format string, args ...any) *Refusal {
	b.refusals.add(reason)
	return &Refusal{Reason: reason, RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

// Return ends a lease before its time, freeing its permit, or, for a
// lease lent from an offering pod's permit, releasing it at the pod. It
// reports false when the lease had already ended: returned, expired, or
// granted by another incarnation.
func (b *Broker) Return(gate string, incarnation, id uint64) bool {
	if incarnation != b.incarnation {
		return false
	}
	p := b.pool(gate)
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.expireLocked(now) // a lease whose time is up has ended, returned or not
	defer p.dispatchLocked(now)
	l := p.leaseLocked(id)
	if l == nil {
		return false
	}
	p.returnLocked(l)
	return true
}

// Withdraw takes back the borrow of gate that carried ticket, for a
// borrower that gave up on its answer: it ends the borrow's lease (an
// offered one is released at its pod), or withdraws it while it waits or
// asks offering pods, or, when the borrow has not arrived, refuses it when
// it does (for Options.MaxLease). It reports whether a lease ended or a
// borrow was withdrawn. A zero ticket names nothing.
func (b *Broker) Withdraw(gate string, ticket uint64) bool {
	p := b.pool(gate)
	if p == nil || ticket == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.expireLocked(now)
	defer p.dispatchLocked(now)
	return p.withdrawLocked(ticket, now, now.Add(b.opts.MaxLease))
}

// Expire ends every lease whose time is up, lending the permits it frees
// to the borrows waiting, forgets the pods that have not borrowed for
// Options.PodRetention, and forgets the asks given up whose ttl has
// passed. Borrow expires leases itself before it decides;
// Run calls Expire so that waiting borrows get expired leases' permits in
// time.
func (b *Broker) Expire() {
	b.eachPool(func(p *pool) {
		now := b.clock.Now()
		p.expireLocked(now)
		p.dispatchLocked(now)
		p.forgetLocked(now.Add(-b.opts.PodRetention))
		p.forgetWithdrawnLocked(now)
		p.forgetAsksLocked(now)
	})
}

// Run calls Expire every interval until ctx ends, and returns nil.
func (b *Broker) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			b.Expire()
		}
	}
}

// GateStats is a gate's state at one instant.
type GateStats struct {
	Gate string
	// Capacity is the capacity in force; Leases the leases of the reserve
	// outstanding, which exceed it only after a shrink, until enough have
	// ended.
	Capacity, Leases, Waiting int
	// Returned and Expired count the leases that ended each way, of the
	// reserve and offered together.
	Returned, Expired uint64
	// OfferingPods are the pods with an Offer stream open; OfferedLeases
	// the leases outstanding lent from their permits, not counted in
	// Leases nor against the capacity.
	OfferingPods, OfferedLeases int
	// OffersGranted, OffersRefused and OffersTimedOut count the asks of
	// offering pods by outcome: granted or refused in time, or no answer
	// while the borrow waited for one.
	OffersGranted, OffersRefused, OffersTimedOut uint64
}

// Stats returns every gate's state, by gate name.
func (b *Broker) Stats() []GateStats {
	var out []GateStats
	b.eachPool(func(p *pool) {
		out = append(out, GateStats{
			Gate: p.gate, Capacity: p.capacity, Leases: len(p.leases), Waiting: p.waiting.Len(),
			Returned: p.returned, Expired: p.expired,
			OfferingPods: p.offeringPodsLocked(), OfferedLeases: len(p.offered),
			OffersGranted: p.offers.granted, OffersRefused: p.offers.refused, OffersTimedOut: p.offers.timedOut,
		})
	})
	return out
}

// Borrowers is what one pod asked of one gate: the demand signal.
type Borrowers struct {
	Gate, Pod        string
	Granted, Refused uint64
	LastBorrow       time.Time
}

// Borrowers returns the counts of every pod that borrowed within
// Options.PodRetention, by gate and pod.
func (b *Broker) Borrowers() []Borrowers {
	var out []Borrowers
	b.eachPool(func(p *pool) {
		start := len(out)
		for pod, t := range p.pods {
			out = append(out, Borrowers{Gate: p.gate, Pod: pod, Granted: t.granted, Refused: t.refused, LastBorrow: t.last})
		}
		slices.SortFunc(out[start:], func(x, y Borrowers) int { return strings.Compare(x.Pod, y.Pod) })
	})
	return out
}

// eachPool calls f on every pool under its lock, by gate name.
func (b *Broker) eachPool(f func(*pool)) {
	b.mu.RLock()
	pools := make([]*pool, 0, len(b.pools))
	for _, p := range b.pools {
		pools = append(pools, p)
	}
	b.mu.RUnlock()
	slices.SortFunc(pools, func(x, y *pool) int { return strings.Compare(x.gate, y.gate) })
	for _, p := range pools {
		p.mu.Lock()
		f(p)
		p.mu.Unlock()
	}
}

// Leases returns the leases of gate outstanding now (those whose time is up
// have ended), 0 for a gate it does not hold.
func (b *Broker) Leases(gate string) int {
	p := b.pool(gate)
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := b.clock.Now()
	p.expireLocked(now)
	p.dispatchLocked(now)
	return len(p.leases)
}
