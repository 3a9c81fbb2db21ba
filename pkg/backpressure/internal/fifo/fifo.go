// Package fifo is the queue that the gate's waiting room and the
// dispatcher's task queue share: a doubly linked list, so that an entry whose
// caller gives up leaves from the middle in O(1), with a free list, so that
// queuing stops allocating once the list has reached its working size.
//
// A List is not safe for concurrent use; its owner guards it with its own
// mutex. The zero value is an empty list.
package fifo

// Entry is one element of a List, holding the owner's Value.
type Entry[T any] struct {
	prev, next *Entry[T]
	// Value is the owner's data.
	Value T
}

// List is a FIFO of entries with a free list of spare ones.
type List[T any] struct {
	head, tail *Entry[T]
	len        int
	free       *Entry[T]
}

// Len returns the number of entries in the list.
func (l *List[T]) Len() int { return l.len }

// Front returns the oldest entry, or nil when the list is empty.
func (l *List[T]) Front() *Entry[T] { return l.head }

// New returns an entry that is not in the list: a recycled one, whose Value
// is as the owner left it when recycling, or a new one with the zero Value.
func (l *List[T]) New() *Entry[T] {
	e := l.free
	if e == nil {
		return &Entry[T]{}
	}
	l.free = e.next
	e.next = nil
	return e
}

// Recycle keeps e, which must not be in the list, for a later New. Value is
// kept as it is: the owner clears what must not outlive one use and may keep
// what is worth reusing, such as a channel.
func (l *List[T]) Recycle(e *Entry[T]) {
	e.prev = nil
	e.next = l.free
	l.free = e
}

// PushBack appends e, which must not be in the list.
func (l *List[T]) PushBack(e *Entry[T]) {
	e.prev, e.next = l.tail, nil
	if l.tail == nil {
		l.head = e
	} else {
		l.tail.next = e
	}
	l.tail = e
	l.len++
}

// Remove takes e, which must be in the list, out of it.
func (l *List[T]) Remove(e *Entry[T]) {
	if e.prev == nil {
		l.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		l.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	l.len--
}

// PopFront removes and returns the oldest entry; the list must not be empty.
func (l *List[T]) PopFront() *Entry[T] {
	e := l.head
	l.Remove(e)
	return e
}
