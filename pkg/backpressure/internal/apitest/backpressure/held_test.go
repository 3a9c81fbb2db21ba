package backpressure_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

// heldFixture is an acknowledging Runtime whose pod holds, outside its
// gate, the permits the test sets (as a permit server's leases): -1 says
// the pod cannot know.
func heldFixture(t *testing.T, first int) (*ackFixture, *atomic.Int64) {
	t.Helper()
	var held atomic.Int64
	f := newAckFixtureWith(t, share(1, first), func(o *backpressure.Options) {
		o.Held = func(gate string) int {
			if gate != ackGate {
				t.Errorf("Held asked about gate %q", gate)
			}
			return int(held.Load())
		}
	})
	return f, &held
}

// Permits held outside the gate count like calls in flight: a smaller
// share is acknowledged only once they fit in it, and nothing while their
// count is unknown, however small the share's demand.
func TestAckCountsPermitsHeldOutsideTheGate(t *testing.T) {
	f, held := heldFixture(t, 4)
	f.waitForAck("epoch-1/1")

	held.Store(4)
	f.publish(share(2, 2))
	f.keepsAck("epoch-1/1") // 4 held, 2 allowed
	held.Store(3)
	f.keepsAck("epoch-1/1")
	held.Store(2)
	f.waitForAck("epoch-1/2")

	// Unknown holds back even a larger share's acknowledgement until known.
	held.Store(-1)
	f.publish(share(3, 6))
	f.keepsAck("epoch-1/2")
	held.Store(0)
	f.waitForAck("epoch-1/3")
}

// Start releases the gate only once what is held outside it has ended too.
func TestReleaseWaitsForPermitsHeldOutsideTheGate(t *testing.T) {
	f, held := heldFixture(t, 3)
	f.waitForAck("epoch-1/1")
	held.Store(2)

	f.stop()
	f.keepsAck("epoch-1/1")
	held.Store(-1)
	f.keepsAck("epoch-1/1")
	select {
	case err := <-f.stopped:
		t.Fatalf("Start returned (%v) while permits were held", err)
	default:
	}
	held.Store(0)
	select {
	case err := <-f.stopped:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return once nothing was held")
	}
	f.stopped <- nil // for the cleanup
	if got := f.ack(); got != "epoch-1/released" {
		t.Errorf("acknowledgement after Start returned = %q, want epoch-1/released", got)
	}
}
