package quotaplan

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// designQuota is the quota of DESIGN.md: 50 in flight at 80%, 220ms typical
// latency, a 2s deadline, 100ms queue wait, 200ms acquire timeout, 1900 rps
// of demand, a retry budget of 10 per second.
func designQuota() *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "logistics-api", Namespace: "shop", Generation: 3},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef:    v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "search-gateway"},
			Downstream:     "logistics.example.com",
			Contract:       v1alpha1.Contract{Concurrency: 50},
			Latency:        v1alpha1.Latency{Typical: metav1.Duration{Duration: 220 * time.Millisecond}},
			Deadline:       metav1.Duration{Duration: 2 * time.Second},
			MaxQueueWait:   &metav1.Duration{Duration: 100 * time.Millisecond},
			AcquireTimeout: &metav1.Duration{Duration: 200 * time.Millisecond},
			SafetyPercent:  80,
			BelowOne:       v1alpha1.BelowOneStrict,
			Demand:         &v1alpha1.Demand{RatePerSecond: 1900},
			Retry:          v1alpha1.RetryPolicy{MaxRetries: 1, BudgetPerSecond: 10},
		},
	}
}

func TestPlanDocument(t *testing.T) {
	q := designQuota()
	p, err := Compute(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	got := p.Document(q.Name, q.Spec.Downstream, q.Generation)
	want := plan.Document{
		Version: 1, Gate: "logistics-api", Downstream: "logistics.example.com", Generation: 3,
		Permits: 5, QueueCapacity: 2, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
	}
	want.Hash = plan.Hash(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Document (-want +got):\n%s", diff)
	}
	if _, err := plan.Marshal(got); err != nil {
		t.Errorf("Marshal(Document): %v", err)
	}

	q.Generation = 4
	if again := p.Document(q.Name, q.Spec.Downstream, q.Generation); again.Hash != got.Hash || again.Generation != 4 {
		t.Errorf("a new generation of the same plan: hash %s generation %d, want hash %s generation 4", again.Hash, again.Generation, got.Hash)
	}
}
