package gate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// A gate in front of a downstream: acquire before the call, release after,
// and treat a rejection as a signal to fail fast to a fallback.
func ExampleGate() {
	g, err := gate.New("logistics", gate.Limits{
		Permits:        5,                      // this pod's share of the downstream's concurrency
		QueueCapacity:  9,                      // absorbs jitter, not backlogs
		MaxQueueWait:   100 * time.Millisecond, // a wait past the deadline budget only delays failure
		TypicalLatency: 220 * time.Millisecond, // calls with less time left are shed at once
	})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := g.Acquire(ctx)
	if err != nil {
		// Local rejection: use a fallback; never retry it.
		fmt.Println("shed:", err)
		return
	}
	defer p.Release()

	// ... call the downstream ...
	fmt.Println("in flight:", g.Stats().InFlight)
	// Output: in flight: 1
}

// Do is the short form: it acquires, runs the function and releases.
func ExampleGate_Do() {
	g, err := gate.New("logistics", gate.Limits{Permits: 1})
	if err != nil {
		panic(err)
	}
	err = g.Do(context.Background(), func(ctx context.Context) error {
		// ... call the downstream with ctx ...
		return nil
	})
	fmt.Println(err)
	// Output: <nil>
}

// Shrinking a gate under load never pre-empts calls in flight: nobody is
// admitted until in-flight is below the new limit.
func ExampleGate_Update() {
	ctx := context.Background()
	g, err := gate.New("logistics", gate.Limits{Permits: 3})
	if err != nil {
		panic(err)
	}
	var held [3]gate.Permit
	for i := range held {
		held[i], _ = g.Acquire(ctx)
	}

	// The workload doubled its replicas: this pod's share drops to 1.
	if err := g.Update(gate.Limits{Permits: 1}); err != nil {
		panic(err)
	}
	for i := range held {
		held[i].Release()
		_, err := g.TryAcquire(ctx)
		fmt.Printf("in flight %d, limit 1: %v\n", g.Stats().InFlight, err)
	}
	// Output:
	// in flight 2, limit 1: gate "logistics": queue full
	// in flight 1, limit 1: gate "logistics": queue full
	// in flight 1, limit 1: <nil>
}

// A rejection says why, and, when the token bucket was empty, how long until
// the next token: what an HTTP middleware puts in Retry-After.
func ExampleRejection() {
	now := time.Now()
	g, err := gate.New("logistics", gate.Limits{Permits: 10, RatePerSecond: 4, Burst: 1})
	if err != nil {
		panic(err)
	}
	_ = g.UpdateAt(gate.Limits{Permits: 10, RatePerSecond: 4, Burst: 1}, now) // start the bucket at now

	p, _ := g.TryAcquireAt(context.Background(), now) // takes the only token
	p.Release()
	_, err = g.TryAcquireAt(context.Background(), now.Add(50*time.Millisecond))

	var r *gate.Rejection
	if errors.As(err, &r) {
		fmt.Println(r.Reason, r.RetryAfter, errors.Is(err, gate.ErrRateLimited))
	}
	// Output: rate_limited 200ms true
}
