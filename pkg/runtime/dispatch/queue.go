package dispatch

import "context"

// task is one submitted task, on its way to a worker.
type task struct {
	prev, next *task
	ctx        context.Context
	fn         func(context.Context)
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

// taskQueue is the bounded FIFO of tasks waiting for a worker: a doubly
// linked list so that a task whose context ends leaves from the middle in
// O(1), with a free list so that queuing does not allocate. It is guarded by
// the dispatcher's mutex.
type taskQueue struct {
	head, tail *task
	len        int
	free       *task
}

func (q *taskQueue) get() *task {
	t := q.free
	if t == nil {
		return &task{}
	}
	q.free = t.next
	t.next = nil
	return t
}

// put recycles t, which is not in the list.
func (q *taskQueue) put(t *task) {
	t.gen++
	t.ctx, t.fn, t.stop, t.enqueued, t.prev = nil, nil, nil, 0, nil
	t.next = q.free
	q.free = t
}

func (q *taskQueue) pushBack(t *task) {
	t.prev, t.next = q.tail, nil
	if q.tail == nil {
		q.head = t
	} else {
		q.tail.next = t
	}
	q.tail = t
	q.len++
}

func (q *taskQueue) remove(t *task) {
	if t.prev == nil {
		q.head = t.next
	} else {
		t.prev.next = t.next
	}
	if t.next == nil {
		q.tail = t.prev
	} else {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
	q.len--
}
