package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// designQuota is the logistics quota of docs/concepts.md's search gateway:
// 50 in flight at 80%, 220ms typical latency, a 2s deadline, 100ms queue
// wait, 200ms acquire timeout, 1900 rps of demand, a retry budget of 10 per
// second.
func designQuota() *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "logistics-api", Namespace: "shop", Generation: 3},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef:    v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "search-gateway"},
			Downstream:     "logistics.example.com",
			Contract:       &v1alpha1.Contract{Concurrency: 50},
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

func TestCurrentDocument(t *testing.T) {
	q := designQuota()
	p, err := quota.Size(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	doc := p.Document(q.Name, q.Spec.Downstream, q.Generation, quota.Shares{Epoch: "uid-1", Revision: 3, Pods: map[string]int{"gw-a": 5, "gw-b": 5}})
	data, err := plan.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	older := doc
	older.Generation = 1
	olderData, _ := plan.Marshal(older)
	other := doc
	other.Revision = 4
	other.Hash = plan.Hash(other)
	otherData, _ := plan.Marshal(other)

	tests := []struct {
		name string
		data string
		want bool
	}{
		{name: "the same document", data: string(data), want: true},
		{name: "the same plan from an older generation", data: string(olderData), want: true},
		{name: "another plan", data: string(otherData), want: false},
		{name: "edited by hand, hash kept", data: strings.Replace(string(data), `"permits":5`, `"permits":6`, 1), want: false},
		{name: "not a document", data: "permits: 5", want: false},
		{name: "absent", data: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := currentDocument(tt.data, doc.Hash); got != tt.want {
				t.Errorf("currentDocument = %v, want %v", got, tt.want)
			}
		})
	}
}
