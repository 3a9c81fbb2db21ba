package gate

import (
	"errors"
	"fmt"
	"time"
)

// Reason says why a gate rejected a call. Its String form is the value of the
// reason label of backpressure_gate_rejected_total.
type Reason uint8

// The reasons a gate rejects a call, in the order the layers are checked.
const (
	// Closed: the gate was closed and admits no more calls.
	Closed Reason = iota + 1
	// DeadlineTooShort: the context's remaining time is below the typical
	// latency, so the call could not finish even if admitted at once; or the
	// call would have had to wait in the waiting room past that point.
	DeadlineTooShort
	// RateLimited: the token bucket is empty. Rejection.RetryAfter says when
	// the next token is due.
	RateLimited
	// QueueFull: no permit is free and the waiting room is at capacity (for
	// TryAcquire, which never waits: no permit is free).
	QueueFull
	// WaitTimeout: the call waited in the waiting room for MaxQueueWait or
	// AcquireTimeout, whichever is shorter, without getting a permit.
	WaitTimeout

	numReasons = iota + 1 // Reasons start at 1; index 0 is unused
)

// Reasons lists every Reason, for code that reports on all of them.
var Reasons = [...]Reason{Closed, DeadlineTooShort, RateLimited, QueueFull, WaitTimeout}

var reasonNames = [...]string{
	Closed:           "closed",
	DeadlineTooShort: "deadline_too_short",
	RateLimited:      "rate_limited",
	QueueFull:        "queue_full",
	WaitTimeout:      "wait_timeout",
}

// String returns the reason in snake case, as used in metric labels.
func (r Reason) String() string {
	if r == 0 || int(r) >= len(reasonNames) {
		return fmt.Sprintf("Reason(%d)", r)
	}
	return reasonNames[r]
}

// Sentinel errors, one per Reason, for errors.Is. Every error a gate returns
// for a rejection is a *Rejection that matches ErrRejected and the sentinel of
// its reason.
var (
	ErrRejected         = errors.New("gate: rejected")
	ErrClosed           = errors.New("gate: closed")
	ErrDeadlineTooShort = errors.New("gate: deadline too short")
	ErrRateLimited      = errors.New("gate: rate limited")
	ErrQueueFull        = errors.New("gate: queue full")
	ErrWaitTimeout      = errors.New("gate: wait timeout")
)

var sentinels = [...]error{
	Closed:           ErrClosed,
	DeadlineTooShort: ErrDeadlineTooShort,
	RateLimited:      ErrRateLimited,
	QueueFull:        ErrQueueFull,
	WaitTimeout:      ErrWaitTimeout,
}

// Rejection is the error a gate returns when it sheds a call. Use errors.As to
// read it, or errors.Is with ErrRejected or a reason's sentinel.
//
// A rejection is local: this process refused the call before it reached the
// downstream, so retrying it only adds load (see LocalRejection).
type Rejection struct {
	// Reason says which layer rejected the call.
	Reason Reason
	// Gate is the name of the gate.
	Gate string
	// RetryAfter is how long until the call could succeed, where the gate
	// knows it (for RateLimited: when the token bucket next has a token);
	// zero otherwise.
	RetryAfter time.Duration
}

// Error describes the rejection, e.g. `gate "logistics": rate limited, retry after 120ms`.
func (r *Rejection) Error() string {
	msg := sentinels[r.Reason].Error()[len("gate: "):]
	if r.RetryAfter > 0 {
		return fmt.Sprintf("gate %q: %s, retry after %v", r.Gate, msg, r.RetryAfter)
	}
	return fmt.Sprintf("gate %q: %s", r.Gate, msg)
}

// Unwrap returns the sentinel of the reason and ErrRejected, so that
// errors.Is matches both.
func (r *Rejection) Unwrap() []error {
	return []error{sentinels[r.Reason], ErrRejected}
}

// LocalRejection reports true: the call was shed by this process's own
// limits. Retry helpers test for this method and never retry such errors.
func (r *Rejection) LocalRejection() bool { return true }
