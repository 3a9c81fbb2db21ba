package plan_test

import (
	"errors"
	"fmt"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// A writer fills the hash, encodes, and stores the bytes under KeyFor.
func ExampleMarshal() {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: "logistics-api", Downstream: "logistics.example.com",
		Generation: 3, Epoch: "0f1e-uid", Revision: 17, Permits: 5, QueueCapacity: 9,
		MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
		Pods: map[string]plan.PodShare{
			"search-gateway-7d9f-abcde": {Permits: 6, QueueCapacity: 10, Workers: 6, RetryBudgetPerSecond: 1.5},
		},
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
	// {"version":2,"gate":"logistics-api","downstream":"logistics.example.com","hash":"7b3832064f4c1e35b87acbd3d90bffe6","generation":3,"epoch":"0f1e-uid","revision":17,"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,"retryBudgetPerSecond":1.25,"pods":{"search-gateway-7d9f-abcde":{"permits":6,"ratePerSecond":0,"burst":0,"queueCapacity":10,"workers":6,"retryBudgetPerSecond":1.5}}}
}

// A reader parses a document; errors name the field and the allowed range.
func ExampleParse() {
	d, err := plan.Parse([]byte(`{"version":2,"gate":"payments","epoch":"e1","revision":4,
		"permits":8,"ratePerSecond":20,"burst":4,
		"queueCapacity":16,"maxQueueWaitSeconds":0.05,"acquireTimeoutSeconds":0.05,
		"latencySeconds":0.1,"deadlineSeconds":1,"workers":8,"retryBudgetPerSecond":2}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Gate, d.Permits, d.MaxQueueWait(), d.Hash != "")

	_, err = plan.Parse([]byte(`{"version":2,"gate":"payments","epoch":"e1","revision":4,
		"permits":8,"ratePerSecond":20,"burst":4,
		"queueCapacity":16,"maxQueueWaitSeconds":0.05,"acquireTimeoutSeconds":0.05,
		"latencySeconds":0.1,"deadlineSeconds":1,"workers":8,"retryBudgetPerSecond":2,
		"pods":{"payments-0":{"permits":-8,"ratePerSecond":20,"burst":0,"queueCapacity":16,"workers":8,"retryBudgetPerSecond":2}}}`))
	fmt.Println(err)

	_, err = plan.Parse([]byte(`{"version":1,"gate":"payments"}`))
	fmt.Println(errors.Is(err, plan.ErrUnsupportedVersion))
	fmt.Println(err)
	// Output:
	// payments 8 50ms true
	// plan: pods["payments-0"].permits: must be in [0, 1048575], got -8
	// plan: pods["payments-0"].burst: must be at least 1 when ratePerSecond is set, got 0
	// true
	// plan: version: unsupported version 1; this reader understands versions 2 and 3
}

// Each pod enforces its own entry, or the base share when it is not named.
func ExampleDocument_For() {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "0f1e-uid", Revision: 17,
		Permits: 5, QueueCapacity: 9, Workers: 5,
		Pods: map[string]plan.PodShare{
			"gateway-a": {Permits: 6, QueueCapacity: 10, Workers: 6},
			"gateway-b": {}, // handing its share over: admits nothing
		},
	}
	for _, pod := range []string{"gateway-a", "gateway-b", "gateway-new", ""} {
		fmt.Printf("%q: %d permits\n", pod, d.For(pod).Permits)
	}
	// Output:
	// "gateway-a": 6 permits
	// "gateway-b": 0 permits
	// "gateway-new": 5 permits
	// "": 5 permits
}

// A pod acknowledges the revision it enforces; the operator reads it back.
func ExampleParseAck() {
	d := plan.Document{Epoch: "0f1e-uid", Revision: 17}
	fmt.Println(plan.AckFor(d))
	fmt.Println(plan.Ack{Epoch: d.Epoch, Released: true})

	a, err := plan.ParseAck("0f1e-uid/released")
	fmt.Println(a.Released, err)
	_, err = plan.ParseAck("6bf7c0e76b4b373f444c17da734b5613") // a version 1 pod's hash
	fmt.Println(err)
	// Output:
	// 0f1e-uid/17
	// 0f1e-uid/released
	// true <nil>
	// plan: acknowledgement "6bf7c0e76b4b373f444c17da734b5613": want <epoch>/<revision> or <epoch>/released
}
