package gate

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// MaxPermits is the largest Permits a gate accepts. In-flight count and limit
// share one atomic word with the gate's flags, which leaves 20 bits for each.
const MaxPermits = 1<<20 - 1

// Limits is the share a gate enforces. The zero value admits nothing: no
// permits, no waiting room.
type Limits struct {
	// Permits is the in-flight limit: how many admitted calls may be running
	// at once. Zero admits no call (a quota too small for one permit per pod).
	Permits int
	// RatePerSecond is the token bucket's refill rate. Zero means unlimited:
	// the rate layer is skipped.
	RatePerSecond float64
	// Burst is the token bucket's size. Below 1 it is taken as 1 when
	// RatePerSecond is set, since a bucket that holds no token admits nothing.
	Burst int
	// QueueCapacity is how many calls may wait for a permit. Zero means calls
	// that find no free permit are rejected at once.
	QueueCapacity int
	// MaxQueueWait bounds the time a call waits for a permit. Zero means no
	// bound of its own (the context and AcquireTimeout still apply).
	MaxQueueWait time.Duration
	// AcquireTimeout bounds the whole Acquire. The rate layer never waits, so
	// it bounds the waiting room as MaxQueueWait does; the shorter one applies.
	// Zero means no bound of its own.
	AcquireTimeout time.Duration
	// TypicalLatency is the usual duration of the gated call. A call whose
	// context has less time left is rejected at once (DeadlineTooShort), and
	// no call waits past the point where this much time would remain. Zero
	// turns the check off.
	TypicalLatency time.Duration
}

// Validate reports every value out of range, or nil.
func (l Limits) Validate() error {
	var errs []error
	if l.Permits < 0 || l.Permits > MaxPermits {
		errs = append(errs, fmt.Errorf("permits %d out of range [0, %d]", l.Permits, MaxPermits))
	}
	if l.RatePerSecond < 0 || math.IsNaN(l.RatePerSecond) || math.IsInf(l.RatePerSecond, 0) {
		errs = append(errs, fmt.Errorf("rate per second %v must be a finite number >= 0", l.RatePerSecond))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("burst %d must be >= 0", l.Burst))
	}
	if l.QueueCapacity < 0 {
		errs = append(errs, fmt.Errorf("queue capacity %d must be >= 0", l.QueueCapacity))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"max queue wait", l.MaxQueueWait}, {"acquire timeout", l.AcquireTimeout}, {"typical latency", l.TypicalLatency}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v must be >= 0", d.name, d.v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("gate: invalid limits: %w", errors.Join(errs...))
	}
	return nil
}

// waitBound returns the longest a call may wait in the waiting room according
// to MaxQueueWait and AcquireTimeout, and false when neither bounds it.
func (l Limits) waitBound() (time.Duration, bool) {
	switch {
	case l.MaxQueueWait > 0 && l.AcquireTimeout > 0:
		return min(l.MaxQueueWait, l.AcquireTimeout), true
	case l.MaxQueueWait > 0:
		return l.MaxQueueWait, true
	case l.AcquireTimeout > 0:
		return l.AcquireTimeout, true
	}
	return 0, false
}

// burst returns the bucket size x/time/rate is given.
func (l Limits) burst() int {
	return max(l.Burst, 1)
}
