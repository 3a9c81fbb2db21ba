package quota

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

func TestSplit(t *testing.T) {
	contract := v1alpha1.DownstreamContractSpec{
		Downstream:           "logistics.example.com",
		Contract:             v1alpha1.Contract{Concurrency: 50, RatePerSecond: 100, Burst: 20},
		RetryBudgetPerSecond: 10,
		// The cap does not bind here: each namespace has one caller of
		// weight 2 at most.
		MaxWeightPerNamespace: 2,
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

// A namespace's quotas share one part: together they weigh no more than the
// contract's maxWeightPerNamespace, and their part is divided among them by
// their own weights and demands.
func TestSplitCapsEachNamespace(t *testing.T) {
	contract := v1alpha1.DownstreamContractSpec{Contract: v1alpha1.Contract{Concurrency: 50}, RetryBudgetPerSecond: 10} // 40 usable
	heavy := sharedSpec()
	heavy.Weight = 1000
	light := sharedSpec()
	small := sharedSpec()
	small.Demand = &v1alpha1.Demand{InFlight: ptr[int32](4)}
	tests := []struct {
		name    string
		cap     int32
		callers []Caller
		permits []int
		reasons []string
	}{{
		// A tenant that states weight 1000 weighs 1, the default cap, as
		// the other namespace does: 20 and 20.
		name:    "a weight above the cap",
		callers: []Caller{{Key: "tenant/greedy", Spec: heavy, Serving: 2}, {Key: "shop/gateway", Spec: light, Serving: 2}},
		permits: []int{20, 20},
		reasons: []string{
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 1 of 2 (its quotas state 1000, capped at the contract's maxWeightPerNamespace): 20; this quota's share of 20 at weight 1000 of 1000 in the namespace: 20",
			"weighted max-min fair share of 40 usable permits at weight 1 of 2: 20",
		},
	}, {
		// Three quotas in one namespace share its part; the other
		// namespace keeps half.
		name: "more quotas in a namespace",
		callers: []Caller{
			{Key: "tenant/a", Spec: light, Serving: 1}, {Key: "tenant/b", Spec: light, Serving: 1}, {Key: "tenant/c", Spec: light, Serving: 1},
			{Key: "shop/gateway", Spec: light, Serving: 2},
		},
		permits: []int{7, 7, 6, 20},
		reasons: []string{
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 1 of 2 (its quotas state 3, capped at the contract's maxWeightPerNamespace): 20; this quota's share of 20 at weight 1 of 3 in the namespace: 7",
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 1 of 2 (its quotas state 3, capped at the contract's maxWeightPerNamespace): 20; this quota's share of 20 at weight 1 of 3 in the namespace: 7",
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 1 of 2 (its quotas state 3, capped at the contract's maxWeightPerNamespace): 20; this quota's share of 20 at weight 1 of 3 in the namespace: 6",
			"weighted max-min fair share of 40 usable permits at weight 1 of 2: 20",
		},
	}, {
		// Within the cap, weights count: the tenant's 3 against the
		// shop's 1. Within the namespace, a caller's demand is met first.
		name: "within a cap of 4",
		cap:  4,
		callers: []Caller{
			{Key: "tenant/a", Spec: small, Serving: 1}, {Key: "tenant/b", Spec: light, Serving: 1}, {Key: "tenant/c", Spec: light, Serving: 1},
			{Key: "shop/gateway", Spec: light, Serving: 2},
		},
		permits: []int{4, 13, 13, 10},
		reasons: []string{
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 3 of 4: 30; this quota's demand of 4 in flight is met (weight 1 of 3 in the namespace)",
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 3 of 4: 30; this quota's share of 30 at weight 1 of 3 in the namespace: 13",
			"namespace tenant: weighted max-min fair share of 40 usable permits at weight 3 of 4: 30; this quota's share of 30 at weight 1 of 3 in the namespace: 13",
			"weighted max-min fair share of 40 usable permits at weight 1 of 4: 10",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := contract
			c.MaxWeightPerNamespace = tt.cap
			got := Split(c, tt.callers)
			for i, p := range got {
				if p.Part.Permits != tt.permits[i] || p.Reason != tt.reasons[i] {
					t.Errorf("caller %s: %d permits, reason %q; want %d, %q", tt.callers[i].Key, p.Part.Permits, p.Reason, tt.permits[i], tt.reasons[i])
				}
			}
		})
	}
}

// TestSplitTenantCannotCrowdOthers is the adversary of the cap, over
// thousands of random contracts from a fixed seed: whatever one tenant
// states (weights up to the API's 1000, any number of quotas) the other
// namespaces' parts are what they would be if the tenant held one quota
// weighing min(its weights, cap) with its callers' demand together; and
// every usable permit is handed out to a caller that can hold it.
func TestSplitTenantCannotCrowdOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 3))
	for round := range 3000 {
		cap := int32(1 + rng.IntN(5))
		contract := v1alpha1.DownstreamContractSpec{Contract: v1alpha1.Contract{Concurrency: int32(1 + rng.IntN(500))}, MaxWeightPerNamespace: cap}
		var callers []Caller
		spec := func(weight int32) v1alpha1.DownstreamQuotaSpec {
			s := sharedSpec()
			s.Weight = weight
			if rng.IntN(3) == 0 {
				s.Demand = &v1alpha1.Demand{InFlight: ptr(int32(1 + rng.IntN(60)))}
			}
			return s
		}
		for ns := range 1 + rng.IntN(4) {
			for q := range 1 + rng.IntN(3) {
				callers = append(callers, Caller{Key: fmt.Sprintf("ns%d/q%d", ns, q), Spec: spec(int32(1 + rng.IntN(3))), Serving: int64(rng.IntN(4))})
			}
		}
		// The tenant: any number of quotas, any weights.
		var tenant []Caller
		var stated, demand int64
		for q := range 1 + rng.IntN(6) {
			c := Caller{Key: fmt.Sprintf("tenant/q%d", q), Spec: spec(int32(1 + rng.IntN(1000))), Serving: int64(1 + rng.IntN(4))}
			tenant = append(tenant, c)
			stated += int64(c.Spec.Weight)
			demand = addDemand(demand, callerDemand(c.Spec, c.Serving))
		}
		one := sharedSpec()
		one.Weight = int32(min(stated, int64(cap)))
		if demand != division.Unbounded {
			one.Demand = &v1alpha1.Demand{InFlight: ptr(int32(demand))}
		}
		got := Split(contract, append(slices.Clone(callers), tenant...))
		alone := Split(contract, append(slices.Clone(callers), Caller{Key: "tenant/one", Spec: one, Serving: 1}))
		for i, c := range callers {
			if got[i].Part.Permits != alone[i].Part.Permits {
				t.Fatalf("round %d: %s gets %d beside the tenant's %d quotas (weights %d), %d beside one quota of weight %d",
					round, c.Key, got[i].Part.Permits, len(tenant), stated, alone[i].Part.Permits, one.Weight)
			}
		}
		all := append(slices.Clone(callers), tenant...)
		var sum int
		for i, p := range got {
			sum += p.Part.Permits
			if p.Part.Permits > 0 && all[i].Serving == 0 {
				t.Fatalf("round %d: a caller without pods got %d permits", round, p.Part.Permits)
			}
		}
		if usable := int(ContractUsable(contract)); sum != usable {
			t.Fatalf("round %d: parts add up to %d, want the %d usable permits", round, sum, usable)
		}
	}
}
