package retry

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Budget is a pod's retry budget: a token bucket from which every retry
// takes one token. Its name is the gate label of its metrics (the budget of
// a gate's plan carries the gate's name).
//
// The zero value is a valid Budget with no tokens: it refuses every retry
// until SetRate gives it some. A Budget is safe for concurrent use.
type Budget struct {
	name string

	lim       atomic.Pointer[rate.Limiter]
	retries   atomic.Uint64
	exhausted atomic.Uint64

	mu sync.Mutex // serialises SetRateAt
}

// NewBudget returns a budget named name that refills at perSecond tokens a
// second and holds at most burst (see SetRate).
func NewBudget(name string, perSecond float64, burst int) *Budget {
	b := &Budget{name: name}
	b.SetRate(perSecond, burst)
	return b
}

// Name returns the budget's name.
func (b *Budget) Name() string { return b.name }

// SetRate changes the refill rate and the size of the bucket; see SetRateAt.
func (b *Budget) SetRate(perSecond float64, burst int) {
	b.SetRateAt(time.Now(), perSecond, burst)
}

// SetRateAt changes the refill rate and the size of the bucket as of now.
// perSecond of zero or less (or NaN) allows no retries; +Inf allows every
// retry. A burst below 1 means one second's worth of tokens, at least one.
// Tokens already in the bucket are kept, up to the new burst.
func (b *Budget) SetRateAt(now time.Time, perSecond float64, burst int) {
	limit, size := rate.Limit(perSecond), burst
	switch {
	case !(perSecond > 0): // also NaN
		limit, size = 0, 0
	case math.IsInf(perSecond, 1):
		limit = rate.Inf
	case size < 1:
		size = int(max(1, math.Ceil(min(perSecond, math.MaxInt32))))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if lim := b.lim.Load(); lim != nil {
		lim.SetLimitAt(now, limit)
		lim.SetBurstAt(now, size)
		return
	}
	b.lim.Store(rate.NewLimiter(limit, size))
}

// Allow takes a token for one retry; see AllowAt.
func (b *Budget) Allow() bool { return b.AllowAt(time.Now()) }

// AllowAt takes a token for one retry at now, or reports false, counting the
// refusal, when the bucket is empty.
func (b *Budget) AllowAt(now time.Time) bool {
	if lim := b.lim.Load(); lim != nil && lim.AllowN(now, 1) {
		return true
	}
	b.exhausted.Add(1)
	return false
}

// BudgetStats is a snapshot of a budget's counters, read at scrape time.
type BudgetStats struct {
	// PerSecond and Burst are the bucket's refill rate and size in force
	// (PerSecond is +Inf when unlimited).
	PerSecond float64
	Burst     int
	// Retries counts the retries Do made with this budget.
	Retries uint64
	// Exhausted counts retries refused because the bucket was empty.
	Exhausted uint64
}

// Stats returns the budget's counters.
func (b *Budget) Stats() BudgetStats {
	st := BudgetStats{Retries: b.retries.Load(), Exhausted: b.exhausted.Load()}
	if lim := b.lim.Load(); lim != nil {
		st.PerSecond, st.Burst = float64(lim.Limit()), lim.Burst()
		if lim.Limit() == rate.Inf {
			st.PerSecond = math.Inf(1)
		}
	}
	return st
}
