package gate

// waiter is one call in the waiting room. Its fields are guarded by the
// gate's mutex until ready is signalled; after that the signalled goroutine
// owns it until it returns it to the free list.
type waiter struct {
	prev, next *waiter
	// ready receives one value when the waiter is granted a permit or the
	// gate closes. It has room for that value, so the sender never blocks.
	ready   chan struct{}
	granted bool // a permit was taken for this waiter
	closed  bool // the gate closed while it waited
}

// waitingRoom is the FIFO of waiters, a doubly linked list so that a waiter
// whose context ends or whose wait times out leaves from the middle in O(1).
// Waiters are recycled through a free list to keep the slow path from
// allocating a channel per wait. The zero value is an empty room.
type waitingRoom struct {
	head, tail *waiter
	len        int
	free       *waiter
}

func (q *waitingRoom) newWaiter() *waiter {
	w := q.free
	if w == nil {
		return &waiter{ready: make(chan struct{}, 1)}
	}
	q.free = w.next
	w.next = nil
	return w
}

// recycle returns w, which must be out of the list and have no pending
// signal, to the free list.
func (q *waitingRoom) recycle(w *waiter) {
	w.granted, w.closed = false, false
	w.prev = nil
	w.next = q.free
	q.free = w
}

func (q *waitingRoom) pushBack(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail == nil {
		q.head = w
	} else {
		q.tail.next = w
	}
	q.tail = w
	q.len++
}

func (q *waitingRoom) remove(w *waiter) {
	if w.prev == nil {
		q.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		q.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
	q.len--
}

func (q *waitingRoom) popFront() *waiter {
	w := q.head
	q.remove(w)
	return w
}
