package sourcetest

import (
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Doc returns a valid plan for gate with the given permits, every pod
// getting the base share; its revision is permits+1, so plans with distinct
// permits are distinct revisions.
func Doc(gate string, permits int) plan.Document {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com",
		Epoch: "epoch-1", Revision: int64(permits) + 1,
		Permits: permits, QueueCapacity: 2 * permits, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.2, DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 1,
	}
	d.Hash = plan.Hash(d)
	return d
}

// Encode marshals d, failing the test on error.
func Encode(t testing.TB, d plan.Document) string {
	t.Helper()
	b, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Version1Doc is a complete document as an operator of the previous major
// version publishes it: every pod's share alike, identified by its hash.
const Version1Doc = `{"version":1,"gate":"a","downstream":"a.example.com","hash":"6bf7c0e76b4b373f444c17da734b5613",` +
	`"generation":3,"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,` +
	`"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,"retryBudgetPerSecond":1.25}`
