package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Defaults for a Policy's zero delays.
const (
	DefaultBaseDelay = 25 * time.Millisecond
	DefaultMaxDelay  = time.Second
)

// Why Do stopped retrying, joined to the last attempt's error so that
// errors.Is finds both.
var (
	// ErrBudgetExhausted: the retry budget had no token.
	ErrBudgetExhausted = errors.New("retry: budget exhausted")
	// ErrNoTimeLeft: the backoff would have ended at or after the context's
	// deadline.
	ErrNoTimeLeft = errors.New("retry: no time left before the deadline")
)

// Classifier reports whether an attempt's error may be retried. It is called
// only for errors that are not local rejections.
//
// A classifier should answer false for errors that mean the downstream is
// over capacity, such as HTTP 429 or gRPC RESOURCE_EXHAUSTED: retrying those
// adds load exactly when there is none to spare. Good candidates are
// transient failures of one attempt: a reset connection, HTTP 502/503 from a
// proxy in front of a healthy fleet, gRPC UNAVAILABLE.
type Classifier func(err error) bool

// Policy says when and how Do retries. The zero value never retries.
type Policy struct {
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// BaseDelay is the backoff cap of the first retry; it doubles for each
	// retry after that. Zero means DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps the backoff. Zero means DefaultMaxDelay.
	MaxDelay time.Duration
	// Retryable decides which errors may be retried. Nil retries nothing.
	Retryable Classifier
	// Budget supplies one token per retry. Nil allows no retries.
	Budget *Budget
	// Rand returns a number in [0, 1) for the jitter. Nil uses
	// math/rand/v2.Float64; tests inject a fixed source.
	Rand func() float64
}

// Backoff returns the delay before retry n (0 for the first retry): full
// jitter, a uniform draw between zero and min(MaxDelay, BaseDelay·2ⁿ), which
// spreads retries of calls that failed together.
func (p Policy) Backoff(n int) time.Duration {
	base, ceiling := p.BaseDelay, p.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if ceiling <= 0 {
		ceiling = DefaultMaxDelay
	}
	ceil := min(base, ceiling)
	for i := 0; i < n && ceil < ceiling; i++ {
		if ceil > ceiling/2 {
			ceil = ceiling
			break
		}
		ceil *= 2
	}
	random := p.Rand
	if random == nil {
		random = rand.Float64
	}
	return time.Duration(random() * float64(ceil))
}

// Do calls fn, and calls it again after a backoff for as long as the policy
// allows (see the package documentation). It returns nil as soon as an
// attempt succeeds. Otherwise it returns the last attempt's error, as is when
// that error is not to be retried or MaxRetries is spent, or joined with
// ErrBudgetExhausted, ErrNoTimeLeft or ctx.Err() when that stopped the
// retries.
func Do(ctx context.Context, p Policy, fn func(context.Context) error) error {
	for n := 0; ; n++ {
		if n > 0 {
			p.Budget.retries.Add(1)
		}
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if n >= p.MaxRetries || IsLocalRejection(err) || p.Retryable == nil || !p.Retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return &stopped{err: err, why: ctx.Err()}
		}
		delay := p.Backoff(n)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= delay {
			return &stopped{err: err, why: ErrNoTimeLeft}
		}
		if p.Budget == nil {
			return &stopped{err: err, why: ErrBudgetExhausted}
		}
		if !p.Budget.Allow() {
			return &stopped{err: err, why: ErrBudgetExhausted}
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return &stopped{err: err, why: ctx.Err()}
			}
		}
	}
}

// IsLocalRejection reports whether err, or an error it wraps, says that this
// process refused the call itself: it has a LocalRejection method that
// reports true, as gate and dispatch rejections do. Such errors are never
// retried.
func IsLocalRejection(err error) bool {
	var lr interface{ LocalRejection() bool }
	return errors.As(err, &lr) && lr.LocalRejection()
}

// stopped is the last attempt's error together with the reason retrying
// stopped.
type stopped struct {
	err, why error
}

func (s *stopped) Error() string   { return s.err.Error() + " (" + s.why.Error() + ")" }
func (s *stopped) Unwrap() []error { return []error{s.err, s.why} }
