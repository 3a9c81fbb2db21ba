package quota

import (
	"math"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

func TestSplit(t *testing.T) {
	contract := v1alpha1.DownstreamContractSpec{
		Downstream:           "logistics.example.com",
		Contract:             v1alpha1.Contract{Concurrency: 50, RatePerSecond: 100, Burst: 20},
		RetryBudgetPerSecond: 10,
	}
	gateway := sharedSpec()
	gateway.Weight = 2
	batch := sharedSpec()
	batch.Demand = &v1alpha1.Demand{InFlight: ptr[int32](10)}
	idle := sharedSpec()

	if got := ContractUsable(contract); got != 40 {
		t.Fatalf("ContractUsable = %d, want 50 × 80%% = 40", got)
	}
	tests := []struct {
		name    string
		callers []Caller
		permits []int
		reasons []string
	}{{
		// Weights 2 and 1, no demand: 40 × 2/3 = 26.67 and 13.33; the unit
		// left goes to the smaller (r+1)/w, 27/2 < 14/1.
		name:    "by weight",
		callers: []Caller{{Key: "shop/gateway", Spec: gateway, Serving: 8}, {Key: "ops/idle", Spec: idle, Serving: 3}},
		permits: []int{27, 13},
		reasons: []string{
			"weighted max-min fair share of 40 usable permits at weight 2 of 3: 27",
			"weighted max-min fair share of 40 usable permits at weight 1 of 3: 13",
		},
	}, {
		// The batch caller can use 10 in flight: it gets them, the gateway
		// the other 30.
		name:    "capped at demand",
		callers: []Caller{{Key: "shop/gateway", Spec: gateway, Serving: 8}, {Key: "ops/batch", Spec: batch, Serving: 3}},
		permits: []int{30, 10},
		reasons: []string{
			"weighted max-min fair share of 40 usable permits at weight 2 of 3: 30",
			"its demand of 10 in flight is met (weight 1 of 3)",
		},
	}, {
		name:    "a caller without Ready pods demands nothing",
		callers: []Caller{{Key: "shop/gateway", Spec: gateway, Serving: 8}, {Key: "ops/idle", Spec: idle}},
		permits: []int{40, 0},
		reasons: []string{
			"weighted max-min fair share of 40 usable permits at weight 2 of 3: 40",
			"no Ready pods: demands nothing, gets 0",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Split(contract, tt.callers)
			var permits int
			var rate, budget float64
			var burst int
			for i, p := range got {
				if p.Part.Permits != tt.permits[i] || p.Reason != tt.reasons[i] {
					t.Errorf("caller %s: %d permits, reason %q; want %d, %q", tt.callers[i].Key, p.Part.Permits, p.Reason, tt.permits[i], tt.reasons[i])
				}
				permits += p.Part.Permits
				rate += p.Part.RatePerSecond
				budget += p.Part.RetryBudgetPerSecond
				burst += p.Part.Burst
				// Each part is a valid input for the caller's sizing.
				if _, err := SizePart(tt.callers[i].Spec, contract, p.Part, int32(max(tt.callers[i].Serving, 1))); err != nil {
					t.Errorf("caller %s: SizePart: %v", tt.callers[i].Key, err)
				}
			}
			// Every usable permit, and the usable rate (100 × 80%), retry
			// budget and at most the usable burst (floor(20 × 80%)) are split.
			if permits != 40 || math.Abs(rate-80) > 1e-9 || math.Abs(budget-10) > 1e-9 || burst > 16 {
				t.Errorf("parts add up to %d permits, %v/s, %v retries/s, burst %d; want 40, 80, 10, at most 16", permits, rate, budget, burst)
			}
		})
	}

	// The batch caller's rate demand is its in-flight demand over its
	// latency, 10 / 220ms = 45.45/s, above its fair level of 80/s at weight
	// 1 of 3: the rate splits 53.33/s and 26.67/s.
	got := Split(contract, tests[1].callers)
	if math.Abs(got[0].Part.RatePerSecond-160.0/3) > 1e-9 || math.Abs(got[1].Part.RatePerSecond-80.0/3) > 1e-9 {
		t.Errorf("rates %v, %v; want 53.33, 26.67", got[0].Part.RatePerSecond, got[1].Part.RatePerSecond)
	}
	if got[1].Demand != 10 || got[0].Demand != division.Unbounded || got[0].Weight != 2 {
		t.Errorf("demands %d, %d, weight %d; want unbounded, 10, 2", got[0].Demand, got[1].Demand, got[0].Weight)
	}
	if len(Split(contract, nil)) != 0 {
		t.Errorf("Split of no callers is not empty")
	}
}

func TestCallerDemand(t *testing.T) {
	spec := sharedSpec()
	for _, tt := range []struct {
		demand  *v1alpha1.Demand
		serving int64
		want    int64
	}{
		{nil, 3, division.Unbounded},
		{nil, 0, 0},
		{&v1alpha1.Demand{InFlight: ptr[int32](7)}, 3, 7},
		{&v1alpha1.Demand{RatePerSecond: 100}, 3, 22}, // 100 × 220ms
		{&v1alpha1.Demand{RatePerSecond: 101}, 3, 23}, // 22.22 rounded up
		{&v1alpha1.Demand{RatePerSecond: 100, InFlight: ptr[int32](5)}, 3, 5},
	} {
		spec.Demand = tt.demand
		if got := callerDemand(spec, tt.serving); got != tt.want {
			t.Errorf("callerDemand(%+v, %d) = %d, want %d", tt.demand, tt.serving, got, tt.want)
		}
	}
}

// TestSplitLeavesNothingToACallerWithoutPods gives the whole surplus to the
// callers that can hold it: a caller without a Ready pod gets nothing even
// when the others' demands leave permits over.
func TestSplitLeavesNothingToACallerWithoutPods(t *testing.T) {
	contract := v1alpha1.DownstreamContractSpec{Contract: v1alpha1.Contract{Concurrency: 50}}
	small := int32(10)
	callers := []Caller{
		{Key: "a/ledger", Spec: v1alpha1.DownstreamQuotaSpec{Demand: &v1alpha1.Demand{InFlight: &small}}, Serving: 2},
		{Key: "b/ledger", Spec: v1alpha1.DownstreamQuotaSpec{Weight: 5}, Serving: 0},
	}
	parts := Split(contract, callers)
	if parts[0].Part.Permits != 40 || parts[1].Part.Permits != 0 {
		t.Errorf("parts %d and %d, want 40 (its demand of 10 and the surplus) and 0", parts[0].Part.Permits, parts[1].Part.Permits)
	}
}
