package retry_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

var errUnavailable = errors.New("downstream unavailable")

// Retry transient failures within the pod's retry budget.
func ExampleDo() {
	// One budget per downstream, shared by every call, at the plan's
	// retryBudgetPerSecond.
	budget := retry.NewBudget("logistics", 1.25, 0)
	policy := retry.Policy{
		MaxRetries: 2,
		// Retry only what is known to be transient; a 429 is not.
		Retryable: func(err error) bool { return errors.Is(err, errUnavailable) },
		Budget:    budget,
	}

	attempts := 0
	err := retry.Do(context.Background(), policy, func(ctx context.Context) error {
		attempts++
		if attempts == 1 {
			return errUnavailable
		}
		return nil
	})
	fmt.Println(attempts, err, budget.Stats().Retries)
	// Output: 2 <nil> 1
}

// A call the pod's own gate shed is never retried, whatever the classifier
// says: retrying a local rejection only adds load.
func ExampleDo_localRejection() {
	g, err := gate.New("logistics", gate.Limits{Permits: 0}) // a quota too small for this pod
	if err != nil {
		panic(err)
	}
	policy := retry.Policy{
		MaxRetries: 3,
		Retryable:  func(error) bool { return true },
		Budget:     retry.NewBudget("logistics", 100, 0),
	}
	attempts := 0
	err = retry.Do(context.Background(), policy, func(ctx context.Context) error {
		attempts++
		return g.Do(ctx, func(context.Context) error { return nil })
	})
	fmt.Println(attempts, errors.Is(err, gate.ErrRejected))
	// Output: 1 true
}
