package gate

import (
	"sync"
	"sync/atomic"
)

// Permit is one admission. Release it exactly when the admitted call ends.
//
// Acquire returns a Permit value rather than a release function because a
// closure allocates, and the uncontended Acquire+Release must not allocate.
// Release is idempotent: it clears the Permit, so a second call on the same
// Permit is a no-op, never a double release. Keep the Permit in one variable
// (or struct field) and call Release on it; a copy would not see that the
// original was released, which is why go vet's copylocks check reports
// copies. Release on one Permit must not race with itself; to release from
// whichever of several goroutines finishes first, use ReleaseFunc.
//
// The zero Permit holds nothing; releasing it is a no-op.
type Permit struct {
	_ noCopy
	g *Gate
}

// Release returns the permit to its gate, or a lent permit to its Lender.
// A permit lent out (Gate.LendOut) goes back to the gate it came from.
// Calls after the first do nothing.
func (p *Permit) Release() {
	g := p.g
	p.g = nil
	// One atomic add, and the mutex only when someone waits for the permit
	// (the queued flag is the top bit). Written out rather than calling
	// g.release so that Release stays within the inlining budget.
	if g != nil && atomic.AddUint64(&g.state, ^uint64(0)) >= queuedBit {
		g.releaseSlow()
	}
}

// Held reports whether p holds a permit that has not been released.
func (p *Permit) Held() bool { return p.g != nil }

// Borrowed reports whether p holds a permit lent by the gate's Lender
// rather than one of the gate's own: it did when it was acquired, and it
// still reports so after LendRules.ReturnEarly has moved its call to one of
// the gate's own.
func (p *Permit) Borrowed() bool { return p.g != nil && p.g.lent != nil }

// ReleaseFunc moves the permit into a function that releases it on its first
// call and does nothing on later ones, from any goroutine. p no longer holds
// the permit afterwards. It allocates; use it where the end of a call is
// observed in several places at once, such as a stream's context and its
// last message.
func (p *Permit) ReleaseFunc() func() {
	g := p.g
	p.g = nil
	if g == nil {
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(g.release) }
}

// noCopy lets go vet's copylocks check flag copies of a Permit.
type noCopy struct{}

// Lock is a no-op that marks noCopy as a lock for go vet.
func (*noCopy) Lock() {}

// Unlock is a no-op that marks noCopy as a lock for go vet.
func (*noCopy) Unlock() {}
