package gate

import "github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/fifo"

// waiter is one call in the waiting room, an entry of the gate's FIFO, which
// lets a waiter whose context ends or whose wait times out leave from the
// middle in O(1) and recycles waiters, so that the slow path does not
// allocate a channel per wait.
type waiter = fifo.Entry[waitState]

// waitState is what a waiter holds. Its fields are guarded by the gate's
// mutex until ready is signalled; after that the signalled goroutine owns
// it until it recycles the waiter.
type waitState struct {
	// ready receives one value when the waiter is granted a permit or the
	// gate closes. It has room for that value, so the sender never blocks.
	ready   chan struct{}
	granted bool // a permit was taken for this waiter
	closed  bool // the gate closed while it waited
}

// newWaiterLocked returns a waiter that is not in the room, with its
// channel.
func (g *Gate) newWaiterLocked() *waiter {
	w := g.room.New()
	if w.Value.ready == nil {
		w.Value.ready = make(chan struct{}, 1)
	}
	return w
}

// recycleLocked returns w, which must be out of the room and have no pending
// signal, to the room's free list, keeping its channel.
func (g *Gate) recycleLocked(w *waiter) {
	w.Value.granted, w.Value.closed = false, false
	g.room.Recycle(w)
}
