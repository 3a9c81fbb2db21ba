// Package gatetest holds the checks that the tests of the gate's middleware
// share: a gate that closes with the test, waits on its counters, the
// no-leak check, and a concurrency high-water mark.
package gatetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// New returns a gate named name enforcing l, closed when the test ends.
func New(t testing.TB, name string, l gate.Limits) *gate.Gate {
	t.Helper()
	g, err := gate.New(name, l)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	t.Cleanup(g.Close)
	return g
}

// WaitFor polls cond until it holds, failing the test after a few seconds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// WaitInFlight waits until g has n calls in flight.
func WaitInFlight(t testing.TB, g *gate.Gate, n int) {
	t.Helper()
	WaitFor(t, "in-flight to settle", func() bool { return g.Stats().InFlight == n })
}

// AssertNoLeak checks that g ends with nobody in flight or queued and that
// exactly its permits can be taken: a leaked permit leaves fewer, a double
// release more. It must run once the calls are done and only on a gate
// without a rate, whose tokens it would spend.
func AssertNoLeak(t testing.TB, g *gate.Gate) {
	t.Helper()
	WaitFor(t, "in-flight and queue to drain", func() bool {
		st := g.Stats()
		return st.InFlight == 0 && st.Queued == 0
	})
	n := g.Limits().Permits
	permits := make([]gate.Permit, n+1)
	var err error
	for i := range n {
		if permits[i], err = g.TryAcquire(context.Background()); err != nil {
			t.Fatalf("permit %d of %d not available after the calls ended: %v", i+1, n, err)
		}
	}
	if permits[n], err = g.TryAcquire(context.Background()); err == nil {
		t.Fatalf("gate admitted %d calls, more than its %d permits", n+1, n)
	}
	for i := range permits {
		permits[i].Release()
	}
}

// Concurrency tracks how many calls run at once and the most ever seen. The
// zero value is ready to use.
type Concurrency struct {
	now, max atomic.Int64
}

// Enter counts a call that starts.
func (c *Concurrency) Enter() {
	n := c.now.Add(1)
	for m := c.max.Load(); n > m && !c.max.CompareAndSwap(m, n); m = c.max.Load() {
	}
}

// Exit counts a call that ends.
func (c *Concurrency) Exit() { c.now.Add(-1) }

// Max returns the most calls ever seen running at once.
func (c *Concurrency) Max() int64 { return c.max.Load() }

// Now returns how many calls run now.
func (c *Concurrency) Now() int { return int(c.now.Load()) }
