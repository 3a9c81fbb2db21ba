package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
)

// A dispatcher refuses work it has no room for instead of running it on the
// caller or queueing it without bound, and Shutdown drains what it accepted.
func ExampleDispatcher() {
	d, err := dispatch.New("fanout", dispatch.Limits{Workers: 1, QueueCapacity: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	started, release := make(chan struct{}), make(chan struct{})
	_ = d.Submit(ctx, func(context.Context) { close(started); <-release })
	<-started // the only worker is busy now

	var ran atomic.Int64
	for i := range 3 {
		err := d.Submit(ctx, func(context.Context) { ran.Add(1) })
		fmt.Printf("task %d: %v\n", i, err)
		if errors.Is(err, dispatch.ErrQueueFull) {
			// Shed: answer the caller now (for example 503), do not block.
		}
	}

	close(release)
	if err := d.Shutdown(ctx); err != nil {
		panic(err)
	}
	st := d.Stats()
	fmt.Println("ran:", ran.Load(), "refused:", st.Rejected[dispatch.QueueFull])
	// Output:
	// task 0: <nil>
	// task 1: <nil>
	// task 2: dispatcher "fanout": queue full
	// ran: 2 refused: 1
}
