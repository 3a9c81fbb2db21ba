package plan_test

import (
	"errors"
	"fmt"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// A writer fills the hash, encodes, and stores the bytes under KeyFor.
func ExampleMarshal() {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: "logistics-api", Downstream: "logistics.example.com",
		Generation: 3, Permits: 5, QueueCapacity: 9,
		MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
	}
	d.Hash = plan.Hash(d)
	data, err := plan.Marshal(d)
	if err != nil {
		panic(err)
	}
	fmt.Println(plan.KeyFor(d.Gate))
	fmt.Println(string(data))
	// Output:
	// logistics-api.json
	// {"version":1,"gate":"logistics-api","downstream":"logistics.example.com","hash":"6bf7c0e76b4b373f444c17da734b5613","generation":3,"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,"retryBudgetPerSecond":1.25}
}

// A reader parses a document; errors name the field and the allowed range.
func ExampleParse() {
	d, err := plan.Parse([]byte(`{"version":1,"gate":"payments","permits":8,"ratePerSecond":20,"burst":4,
		"queueCapacity":16,"maxQueueWaitSeconds":0.05,"acquireTimeoutSeconds":0.05,
		"latencySeconds":0.1,"deadlineSeconds":1,"workers":8,"retryBudgetPerSecond":2}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Gate, d.Permits, d.MaxQueueWait(), d.Hash != "")

	_, err = plan.Parse([]byte(`{"version":1,"gate":"payments","permits":-8,"ratePerSecond":20,"burst":0,
		"queueCapacity":16,"maxQueueWaitSeconds":0.05,"acquireTimeoutSeconds":0.05,
		"latencySeconds":0.1,"deadlineSeconds":1,"workers":8,"retryBudgetPerSecond":2}`))
	fmt.Println(err)

	_, err = plan.Parse([]byte(`{"version":2,"gate":"payments"}`))
	fmt.Println(errors.Is(err, plan.ErrUnsupportedVersion))
	// Output:
	// payments 8 50ms true
	// plan: permits: must be in [0, 2147483647], got -8
	// plan: burst: must be at least 1 when ratePerSecond is set, got 0
	// true
}

// GateFromKey skips the kubelet's bookkeeping entries of a mounted volume.
func ExampleGateFromKey() {
	for _, name := range []string{"..data", "logistics-api.json", "README"} {
		gate, ok := plan.GateFromKey(name)
		fmt.Printf("%q %q %v\n", name, gate, ok)
	}
	// Output:
	// "..data" "" false
	// "logistics-api.json" "logistics-api" true
	// "README" "" false
}
