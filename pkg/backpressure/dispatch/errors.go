package dispatch

import (
	"errors"
	"fmt"
)

// Reason says why a task did not run. Its String form is the value of the
// reason label of backpressure_dispatcher_rejected_total.
type Reason uint8

// The reasons a task is refused or dropped.
const (
	// QueueFull: Submit found every worker busy and the queue at capacity.
	QueueFull Reason = iota + 1
	// Closed: Submit was called after Shutdown.
	Closed
	// ContextDone: the task's context ended before a worker started it,
	// either before Submit or while it was queued; it left the queue.
	ContextDone
	// Shutdown: the task was still queued when Shutdown's context ended.
	Shutdown

	numReasons = iota + 1 // Reasons start at 1; index 0 is unused
)

// Reasons lists every Reason, for code that reports on all of them.
var Reasons = [...]Reason{QueueFull, Closed, ContextDone, Shutdown}

var reasonNames = [...]string{
	QueueFull:   "queue_full",
	Closed:      "closed",
	ContextDone: "context_done",
	Shutdown:    "shutdown",
}

// String returns the reason in snake case, as used in metric labels.
func (r Reason) String() string {
	if r == 0 || int(r) >= len(reasonNames) {
		return fmt.Sprintf("Reason(%d)", r)
	}
	return reasonNames[r]
}

// Sentinel errors for errors.Is. Submit's rejections are *Rejection values
// that match ErrRejected and ErrQueueFull or ErrClosed.
var (
	ErrRejected  = errors.New("dispatch: rejected")
	ErrQueueFull = errors.New("dispatch: queue full")
	ErrClosed    = errors.New("dispatch: closed")
)

// Rejection is the error Submit returns when it refuses a task.
type Rejection struct {
	// Reason is QueueFull or Closed.
	Reason Reason
	// Dispatcher is the name of the dispatcher.
	Dispatcher string
}

// Error describes the rejection, e.g. `dispatcher "fanout": queue full`.
func (r *Rejection) Error() string {
	return fmt.Sprintf("dispatcher %q: %s", r.Dispatcher, r.sentinel().Error()[len("dispatch: "):])
}

func (r *Rejection) sentinel() error {
	if r.Reason == Closed {
		return ErrClosed
	}
	return ErrQueueFull
}

// Unwrap returns the reason's sentinel and ErrRejected, for errors.Is.
func (r *Rejection) Unwrap() []error { return []error{r.sentinel(), ErrRejected} }

// LocalRejection reports true: this process refused the task, and retry
// helpers must not retry it.
func (r *Rejection) LocalRejection() bool { return true }
