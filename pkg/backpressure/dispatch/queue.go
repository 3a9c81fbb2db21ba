package dispatch

import (
	"context"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/fifo"
)

// task is one submitted task on its way to a worker, an entry of the
// dispatcher's bounded FIFO, which lets a task whose context ends leave from
// the middle in O(1) and recycles tasks, so that queuing does not allocate.
// It is guarded by the dispatcher's mutex.
type task = fifo.Entry[taskState]

// taskState is what a task holds.
type taskState struct {
	ctx context.Context
	fn  func(context.Context)
	// enqueued is when the task entered the queue, on the dispatcher's
	// monotonic clock; zero for tasks handed straight to an idle worker.
	enqueued int64
	// stop unregisters the context.AfterFunc that takes the task out of the
	// queue when its context ends; nil when no such hook was needed.
	stop func() bool
	// gen changes whenever the task leaves the queue, so that a late
	// AfterFunc can tell it is no longer about this submission.
	gen uint64
}

// recycleLocked returns t, which is not in the queue, to the queue's free
// list, clearing what must not outlive this submission.
func (d *Dispatcher) recycleLocked(t *task) {
	t.Value = taskState{gen: t.Value.gen + 1}
	d.queue.Recycle(t)
}
