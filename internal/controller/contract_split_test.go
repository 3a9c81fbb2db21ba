package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func TestSplit(t *testing.T) {
	dc := &v1alpha1.DownstreamContract{Spec: v1alpha1.DownstreamContractSpec{
		Contract:             v1alpha1.Contract{Concurrency: 50, RatePerSecond: 200, Burst: 20},
		RetryBudgetPerSecond: 8,
	}}
	mk := func(ns string, weight int32, inFlight *int32, serving int64) *sharer {
		q := &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"}, Spec: v1alpha1.DownstreamQuotaSpec{
			Weight:  weight,
			Latency: v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
		}}
		if inFlight != nil {
			q.Spec.Demand = &v1alpha1.Demand{InFlight: inFlight}
		}
		return &sharer{quota: q, serving: serving}
	}
	sharers := []*sharer{
		mk("a", 1, nil, 2),               // unbounded
		mk("b", 3, nil, 1),               // unbounded, weight 3
		mk("c", 1, ptr.To[int32](4), 2),  // wants 4
		mk("d", 5, ptr.To[int32](50), 0), // no Ready pods: nothing
	}
	parts, rates, reasons := split(dc, sharers, 40)
	var got []int
	for _, p := range parts {
		got = append(got, p.Permits)
	}
	// c gets its 4; a and b split the other 36 by weight 1:3; d nothing.
	if diff := cmp.Diff([]int{9, 27, 4, 0}, got); diff != "" {
		t.Errorf("permits (-want +got):\n%s", diff)
	}
	var sum float64
	for _, r := range rates {
		sum += r
	}
	if sum < 159.999 || sum > 160.001 || rates[3] != 0 {
		t.Errorf("rates %v sum to %v, want 160 (200 × 80%%) with none for the caller without pods", rates, sum)
	}
	if retry := parts[1].RetryBudgetPerSecond; retry != 8*27.0/40 {
		t.Errorf("retry budget %v, want 8 × 27/40", retry)
	}
	var bursts int
	for _, p := range parts {
		bursts += p.Burst
	}
	if bursts > 16 {
		t.Errorf("bursts %d exceed the usable 16", bursts)
	}
	if !strings.Contains(reasons[2], "demand of 4 in flight is met") || !strings.Contains(reasons[3], "no Ready pods") ||
		!strings.Contains(reasons[1], "weight 3 of 10") {
		t.Errorf("reasons %q", reasons)
	}
}
