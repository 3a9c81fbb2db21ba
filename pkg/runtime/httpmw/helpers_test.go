package httpmw

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
)

func newGate(t *testing.T, l gate.Limits) *gate.Gate {
	t.Helper()
	return newNamedGate(t, "orders", l)
}

func newNamedGate(t *testing.T, name string, l gate.Limits) *gate.Gate {
	t.Helper()
	g, err := gate.New(name, l)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	t.Cleanup(g.Close)
	return g
}

// waitFor polls cond until it holds, failing the test after a few seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitInFlight(t *testing.T, g *gate.Gate, n int) {
	t.Helper()
	waitFor(t, "in-flight to settle", func() bool { return g.Stats().InFlight == n })
}

// assertNoLeak checks that g ends with nobody in flight or queued and that
// exactly its permits can be taken: a leaked permit leaves fewer, a double
// release more. It must run once the callers are done and only on a gate
// without a rate, whose tokens it would spend.
func assertNoLeak(t *testing.T, g *gate.Gate) {
	t.Helper()
	waitFor(t, "in-flight and queue to drain", func() bool {
		st := g.Stats()
		return st.InFlight == 0 && st.Queued == 0
	})
	n := g.Limits().Permits
	permits := make([]gate.Permit, n+1)
	for i := range n {
		var err error
		if permits[i], err = g.TryAcquire(context.Background()); err != nil {
			t.Fatalf("permit %d of %d not available after the calls ended: %v", i+1, n, err)
		}
	}
	var err error
	if permits[n], err = g.TryAcquire(context.Background()); err == nil {
		t.Fatalf("gate admitted %d calls, more than its %d permits", n+1, n)
	}
	for i := range permits {
		permits[i].Release()
	}
}

// concurrency tracks how many calls run at once and the most ever seen.
type concurrency struct {
	now, max atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for m := c.max.Load(); n > m && !c.max.CompareAndSwap(m, n); m = c.max.Load() {
	}
}

func (c *concurrency) exit() { c.now.Add(-1) }
