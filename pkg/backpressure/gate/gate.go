package gate

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/fifo"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/histogram"
)

// Gate enforces one share inside a process: a token bucket, then a waiting
// room, then permits. See the package documentation for the guarantees.
//
// The zero value is a valid Gate with no name, no permits and no waiting
// room: it rejects every call until Update gives it some. A Gate is safe for
// concurrent use by multiple goroutines. A Gate must not be copied.
type Gate struct {
	// state is the admission word described in state.go. It is the first
	// field so that it is 64-bit aligned on 32-bit platforms too.
	state uint64

	// name is fixed at New.
	name string
	// limiter is the token bucket, created the first time the gate is given a
	// rate and resized in place afterwards.
	limiter atomic.Pointer[rate.Limiter]
	// latency is Limits.TypicalLatency, read by the slow path before it takes mu.
	latency  atomic.Int64
	rejected [numReasons]atomic.Uint64
	waits    histogram.Histogram
	// phantoms counts fast-path admissions undone after a lost race; tests
	// read it to know that path ran.
	phantoms atomic.Uint64
	// lender lends permits beyond the gate's own (SetLender); nil for none.
	lender                        atomic.Pointer[lenderRef]
	borrowed, notLent, lendFailed atomic.Uint64
	// returnedEarly counts loans returned before their calls ended
	// (LendRules.ReturnEarly).
	returnedEarly atomic.Uint64
	// lentInFlight counts the calls running on lent permits, less those
	// moved to the gate's own (Stats.BorrowedInFlight).
	lentInFlight atomic.Int64
	// lent is set, and nothing else, in the Gate that stands for a lent
	// permit (see lentPermit).
	lent *loanHold
	// lentOut counts the permits lent out to other pods' calls (LendOut),
	// lentOutInFlight those not yet released.
	lentOut         atomic.Uint64
	lentOutInFlight atomic.Int64
	// lentFrom is set, and nothing else, in the Gate that stands for a
	// permit lent out: the gate it was taken from (see LendOut).
	lentFrom *Gate

	mu             sync.Mutex
	limits         Limits               // guarded by mu
	room           fifo.List[waitState] // guarded by mu
	admittedLocked uint64               // guarded by mu; admissions not in the state word, see state.go
	admittedShown  uint64               // guarded by mu; the largest Admitted that Stats returned
	// loans are the calls running on lent permits that may move to the
	// gate's own (LendRules.ReturnEarly), oldest first; guarded by mu.
	// While it is not empty the queued bit stays set, so that every
	// release takes the slow path, where dispatchLocked moves one.
	loans fifo.List[*Gate]
}

// New returns a gate named name (the gate label of its metrics and the Gate
// field of its rejections) that enforces l.
func New(name string, l Limits) (*Gate, error) {
	g := &Gate{name: name}
	if err := g.Update(l); err != nil {
		return nil, err
	}
	return g, nil
}

// Name returns the gate's name.
func (g *Gate) Name() string { return g.name }

// Limits returns the limits in force.
func (g *Gate) Limits() Limits {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limits
}

// Acquire admits a call or rejects it. On admission it returns a Permit whose
// Release must be called when the call ends; on rejection a *Rejection (see
// Reason); if ctx ends while the call waits, ctx.Err(). As with
// x/sync/semaphore, if ctx is already done Acquire may still succeed without
// blocking.
//
// Acquire blocks only in the waiting room, and never longer than MaxQueueWait,
// AcquireTimeout, or the point where the context's remaining time falls below
// TypicalLatency.
func (g *Gate) Acquire(ctx context.Context) (Permit, error) {
	// The lock-free path: no rate, nobody waiting, no deadline to check, a
	// permit free. See state.go for why a lost race is undone rather than
	// prevented. (Written out here and in TryAcquire: a shared helper would
	// cost a call on the hot path.)
	s := g.load()
	if s&(slowBits|latencyBit) != 0 && (s&slowBits != 0 || !noDeadline(ctx)) {
		return g.acquireSlow(ctx, time.Time{}, true)
	}
	if s&inflightMask < s&limitMask>>limitShift && s&countMask < countFold<<countShift {
		if fastAdmissible(g.add(admitOne) - admitOne) {
			return Permit{g: g}, nil
		}
		g.undoAdmit()
	}
	return g.acquireSlow(ctx, time.Time{}, true)
}

// TryAcquire is Acquire without the waiting room: when no permit is free it
// rejects the call at once with QueueFull.
func (g *Gate) TryAcquire(ctx context.Context) (Permit, error) {
	s := g.load()
	if s&(slowBits|latencyBit) != 0 && (s&slowBits != 0 || !noDeadline(ctx)) {
		return g.acquireSlow(ctx, time.Time{}, false)
	}
	if s&inflightMask < s&limitMask>>limitShift && s&countMask < countFold<<countShift {
		if fastAdmissible(g.add(admitOne) - admitOne) {
			return Permit{g: g}, nil
		}
		g.undoAdmit()
	}
	return g.acquireSlow(ctx, time.Time{}, false)
}

// undoAdmit takes back a fast-path admission that lost its race, handing
// the permit on like a release.
func (g *Gate) undoAdmit() {
	g.phantoms.Add(1)
	if g.add(^uint64(admitOne-1)) >= queuedBit { // subtracts admitOne
		g.releaseSlow()
	}
}

// TryAcquireAt is TryAcquire with the current time given, for the token
// bucket and the deadline check, so that tests can step time.
func (g *Gate) TryAcquireAt(ctx context.Context, now time.Time) (Permit, error) {
	return g.acquireSlow(ctx, now, false)
}

// Do acquires a permit, calls fn and releases the permit when fn returns or
// panics. It returns Acquire's error without calling fn, or fn's error.
func (g *Gate) Do(ctx context.Context, fn func(context.Context) error) error {
	p, err := g.Acquire(ctx)
	if err != nil {
		return err
	}
	defer p.Release()
	return fn(ctx)
}

func noDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return !ok
}

// acquireSlow runs every layer in order. now is the arrival time, or zero to
// read the clock only if some layer needs it.
func (g *Gate) acquireSlow(ctx context.Context, now time.Time, wait bool) (Permit, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	s := g.load()
	// An over-release leaves in-flight above every limit, which sends every
	// Acquire here: report it rather than shed calls forever.
	g.checkOverRelease(s)
	if s&closedBit != 0 {
		return g.reject(Closed, 0)
	}
	deadline, hasDeadline := ctx.Deadline()
	latency := time.Duration(g.latency.Load())
	checkDeadline := latency > 0 && hasDeadline
	if (checkDeadline || s&ratedBit != 0) && now.IsZero() {
		now = time.Now()
	}
	if checkDeadline && deadline.Sub(now) < latency {
		return g.reject(DeadlineTooShort, 0)
	}
	if s&ratedBit != 0 {
		if lim := g.limiter.Load(); !lim.AllowN(now, 1) {
			return g.reject(RateLimited, nextToken(lim, now))
		}
	}
	if g.tryAdmit() {
		return Permit{g: g}, nil
	}

	g.mu.Lock()
	if g.admitLocked(false) {
		g.mu.Unlock()
		return Permit{g: g}, nil
	}
	if g.load()&closedBit != 0 {
		g.mu.Unlock()
		return g.reject(Closed, 0)
	}
	// now was read above if the deadline check needs it; a call that
	// waits reads it below, so the path that sheds or lends reads no clock
	// under the lock.
	bound, bounded := g.limits.waitBound()
	reason := WaitTimeout
	if checkDeadline {
		if d := deadline.Sub(now) - latency; !bounded || d < bound {
			bound, bounded, reason = d, true, DeadlineTooShort
		}
	}
	if !wait || g.room.Len() >= g.limits.QueueCapacity {
		g.mu.Unlock()
		if wait {
			// The call may wait for a lent permit as long as the waiting
			// room would have kept it, had it had a place there: a
			// permit going back to the reserve in that time serves it.
			var lendWait time.Duration
			if bounded {
				lendWait = max(bound, 0)
			}
			if lg := g.lendNow(ctx, deadline, hasDeadline, lendWait); lg != nil {
				return Permit{g: lg}, nil
			}
		}
		return g.reject(QueueFull, 0)
	}
	if now.IsZero() {
		now = time.Now()
	}
	if bounded && bound <= 0 {
		g.mu.Unlock()
		return g.reject(reason, 0)
	}
	w := g.newWaiterLocked()
	g.room.PushBack(w)
	g.setQueuedLocked()
	// A release may have freed a permit after admitLocked failed but before
	// the queued bit was set; such a release did not dispatch, so do it here.
	g.dispatchLocked()
	if w.Value.granted {
		<-w.Value.ready
		g.recycleLocked(w)
		g.admittedLocked++
		g.mu.Unlock()
		return Permit{g: g}, nil
	}
	g.mu.Unlock()
	lendFor := bound
	if !bounded {
		lendFor = deadline.Sub(now) // only used when the call has a deadline
	}
	return g.await(ctx, w, now, bound, bounded, reason, g.startLending(ctx, deadline, hasDeadline, lendFor))
}

// await blocks until w is granted a permit, the gate closes, ctx ends or the
// wait bound passes, or, when lending is not nil, the Lender lends a permit
// first. Only calls that reach it count in the queue-wait histogram.
func (g *Gate) await(ctx context.Context, w *waiter, start time.Time, bound time.Duration, bounded bool, reason Reason, lending *lending) (Permit, error) {
	var expired <-chan time.Time
	if bounded {
		t := time.NewTimer(bound)
		defer t.Stop()
		expired = t.C
	}
	var lentCh <-chan lent
	var returnEarly bool
	if lending != nil {
		lentCh, returnEarly = lending.result, lending.returnEarly
	}
	var granted, closed bool
	var loan Loan
	var err error
	for waiting := true; waiting; {
		waiting = false
		select {
		case r := <-lentCh:
			lending, lentCh = nil, nil // its outcome is taken
			if !g.countLend(ctx, r.loan, r.err) {
				waiting = true // refused: wait for the gate's own permits only
				continue
			}
			loan = r.loan
			g.mu.Lock()
			if granted, closed = g.leaveLocked(w); granted {
				g.admittedLocked++
			}
			g.mu.Unlock()
		case <-w.Value.ready:
			g.mu.Lock()
			granted, closed = w.Value.granted, w.Value.closed
			g.recycleLocked(w)
			if granted {
				g.admittedLocked++
			}
			g.mu.Unlock()
		case <-ctx.Done():
			err = ctx.Err()
			g.mu.Lock()
			if granted, _ = g.leaveLocked(w); granted {
				// Granted as ctx ended: hand the permit on, as if never taken
				// (it was not counted as an admission yet).
				g.releaseLocked()
				granted = false
			}
			g.mu.Unlock()
		case <-expired:
			// A grant that raced with the timer is kept: it was made while a
			// permit was free, and the caller is still waiting for it.
			g.mu.Lock()
			if granted, closed = g.leaveLocked(w); granted {
				g.admittedLocked++
			}
			g.mu.Unlock()
		}
	}
	if lending != nil {
		lending.abandon()
	}
	g.waits.Observe(time.Since(start))
	switch {
	case loan != nil && !granted && !closed:
		g.borrowed.Add(1)
		return Permit{g: g.lentPermit(loan, returnEarly)}, nil
	case loan != nil:
		// The gate's own permit came at the same moment (keep it), or the
		// gate closed (it admits nothing, lent or not).
		loan.Return()
	}
	switch {
	case granted:
		return Permit{g: g}, nil
	case err != nil:
		return Permit{}, err
	case closed:
		return g.reject(Closed, 0)
	}
	return g.reject(reason, 0)
}

// leaveLocked takes w out of the waiting room, or, if it was already
// signalled, consumes the signal; either way it recycles w and reports what
// the signal said.
func (g *Gate) leaveLocked(w *waiter) (granted, closed bool) {
	granted, closed = w.Value.granted, w.Value.closed
	if granted || closed {
		<-w.Value.ready
	} else {
		g.room.Remove(w)
		g.clearQueuedIfIdleLocked()
	}
	g.recycleLocked(w)
	return granted, closed
}

func (g *Gate) reject(r Reason, retryAfter time.Duration) (Permit, error) {
	g.rejected[r].Add(1)
	return Permit{}, &Rejection{Reason: r, Gate: g.name, RetryAfter: retryAfter}
}

// nextToken returns how long until lim has a whole token.
func nextToken(lim *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - lim.TokensAt(now)
	r := float64(lim.Limit())
	if missing <= 0 || r <= 0 {
		// A token arrived after AllowN said no; any positive hint will do.
		return time.Nanosecond
	}
	return time.Duration(math.Ceil(missing / r * float64(time.Second)))
}

// tryAdmit admits one call without the mutex if nobody waits and a permit is
// free. It uses a compare-and-swap, which never leaves a phantom: the slow
// path is where contention at the limit ends up.
func (g *Gate) tryAdmit() bool {
	for {
		s := g.load()
		if s&(queuedBit|closedBit) != 0 || s&inflightMask >= s&limitMask>>limitShift || s&countMask >= countFold<<countShift {
			return false
		}
		if g.cas(s, s+admitOne) {
			return true
		}
	}
}

// admitLocked admits one call if a permit is free under the limit in force.
// A new arrival (forWaiter false) is refused while anyone waits: no barging,
// and is counted at once. A waiter is counted by its own goroutine when it
// takes the permit, since one whose context ended meanwhile hands it back;
// a call moving off a loan (forWaiter true too) was counted as borrowed.
// The room, not the queued bit, says whether anyone waits: the bit is set
// for loans that may move too.
func (g *Gate) admitLocked(forWaiter bool) bool {
	waiting := g.room.Len() != 0
	for {
		s := g.load()
		if s&closedBit != 0 || inflight(s) >= limit(s) || (!forWaiter && waiting) {
			return false
		}
		n := s + 1
		if !forWaiter {
			n += 1 << countShift
		}
		// Fold part of the admission field into admittedLocked before it
		// nears its headroom. Only part: the field may hold phantoms whose
		// undo is still to come, and it must not go below zero when they
		// leave (see state.go).
		var folded uint64
		if count(n) >= countFold {
			folded = countFold / 2
		}
		if g.cas(s, n-folded<<countShift) {
			g.admittedLocked += folded
			return true
		}
	}
}

// dispatchLocked admits waiters from the front while permits are free, the
// APF way, and then moves calls running on loans to the permits still free
// (LendRules.ReturnEarly): called whenever a permit may have been freed or
// the limit raised.
func (g *Gate) dispatchLocked() {
	for g.room.Len() != 0 && g.admitLocked(true) {
		w := g.room.PopFront()
		w.Value.granted = true
		w.Value.ready <- struct{}{}
	}
	for g.room.Len() == 0 && g.loans.Len() != 0 && g.admitLocked(true) {
		g.moveLoanLocked()
	}
	g.clearQueuedIfIdleLocked()
}

// clearQueuedIfIdleLocked clears the queued bit when nobody waits and no
// loan may move.
func (g *Gate) clearQueuedIfIdleLocked() {
	if g.room.Len() == 0 && g.loans.Len() == 0 {
		g.clearQueuedLocked()
	}
}

func (g *Gate) setQueuedLocked() {
	for {
		s := g.load()
		if s&queuedBit != 0 || g.cas(s, s|queuedBit) {
			return
		}
	}
}

func (g *Gate) clearQueuedLocked() {
	for {
		s := g.load()
		if s&queuedBit == 0 || g.cas(s, s&^queuedBit) {
			return
		}
	}
}

// release returns one permit, for ReleaseFunc.
func (g *Gate) release() {
	if g.add(^uint64(0)) >= queuedBit {
		g.releaseSlow()
	}
}

// releaseSlow follows a release that found waiters, or loans that may move:
// it hands the permit to the first waiter, or moves a loan's call to it.
// For a lent permit (see lentPermit) it ends the loan; for a permit lent
// out (see LendOut) it releases the permit in the gate it came from.
func (g *Gate) releaseSlow() {
	if g.lent != nil {
		g.endLoan()
		return
	}
	if g.lentFrom != nil {
		g.endLendOut()
		return
	}
	g.mu.Lock()
	g.checkOverRelease(g.load())
	g.dispatchLocked()
	g.mu.Unlock()
}

func (g *Gate) releaseLocked() {
	s := g.add(^uint64(0))
	g.checkOverRelease(s)
	if s >= queuedBit {
		g.dispatchLocked()
	}
}

// Update puts l in force; see UpdateAt.
func (g *Gate) Update(l Limits) error {
	return g.UpdateAt(l, time.Now())
}

// UpdateAt puts l in force atomically with respect to admissions, with now as
// the time of the token bucket's change. It returns an error, and changes
// nothing, if l is invalid.
//
// A larger limit admits waiters at once, in order. A smaller one never
// pre-empts: calls in flight finish, and nobody is admitted until in-flight
// is below the new limit. A smaller QueueCapacity keeps every waiter already
// queued and only refuses new ones; waiters keep the wait bound they were
// queued with. The token bucket keeps the tokens it holds, up to the new
// burst.
func (g *Gate) UpdateAt(l Limits, now time.Time) error {
	if err := l.Validate(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l.RatePerSecond > 0 {
		if lim := g.limiter.Load(); lim == nil {
			g.limiter.Store(rate.NewLimiter(rate.Limit(l.RatePerSecond), l.burst()))
		} else {
			lim.SetLimitAt(now, rate.Limit(l.RatePerSecond))
			lim.SetBurstAt(now, l.burst())
		}
	}
	g.latency.Store(int64(l.TypicalLatency))
	g.limits = l
	for {
		s := g.load()
		n := s&^(limitMask|ratedBit|latencyBit) | uint64(l.Permits)<<limitShift
		if l.RatePerSecond > 0 {
			n |= ratedBit
		}
		if l.TypicalLatency > 0 {
			n |= latencyBit
		}
		if g.cas(s, n) {
			break
		}
	}
	g.dispatchLocked()
	return nil
}

// Close rejects every queued call and every later Acquire with Closed. Calls
// in flight are not affected and release their permits as usual. Close is
// idempotent.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		s := g.load()
		if g.cas(s, s|closedBit) {
			break
		}
	}
	for g.room.Len() != 0 {
		w := g.room.PopFront()
		w.Value.closed = true
		w.Value.ready <- struct{}{}
	}
	// Loans that may move keep the bit: their calls end on the slow path.
	g.clearQueuedIfIdleLocked()
}
