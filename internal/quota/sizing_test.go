package quota

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// quantityText compares quantities by their canonical text, which is what
// status shows.
var quantityText = cmp.Comparer(func(a, b resource.Quantity) bool { return a.String() == b.String() })

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// designSpec is the logistics quota of docs/concepts.md's search gateway,
// as a file would give it: the defaulted fields left empty.
func designSpec() v1alpha1.DownstreamQuotaSpec {
	return v1alpha1.DownstreamQuotaSpec{
		WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "search-gateway"},
		Downstream:  "logistics.example.com",
		Contract:    &v1alpha1.Contract{Concurrency: 50},
		Latency: v1alpha1.Latency{
			Typical: metav1.Duration{Duration: 220 * time.Millisecond},
			Worst:   duration(1800 * time.Millisecond),
		},
		Deadline:       metav1.Duration{Duration: 2 * time.Second},
		MaxQueueWait:   duration(100 * time.Millisecond),
		AcquireTimeout: duration(200 * time.Millisecond),
		Demand:         &v1alpha1.Demand{RatePerSecond: 1900},
		Retry:          v1alpha1.RetryPolicy{MaxRetries: 1, BudgetPerSecond: 10},
	}
}

func TestReasonsMatchTheAPI(t *testing.T) {
	for sizingReason, apiReason := range map[string]string{
		sizing.ReasonQuotaTooSmall:        v1alpha1.ReasonQuotaTooSmall,
		sizing.ReasonOvercommitted:        v1alpha1.ReasonOvercommitted,
		sizing.ReasonDeadlineBelowLatency: v1alpha1.ReasonDeadlineBelowLatency,
		sizing.ReasonDemandExceedsQuota:   v1alpha1.ReasonDemandExceedsQuota,
	} {
		if sizingReason != apiReason {
			t.Errorf("sizing reason %q differs from the API's %q", sizingReason, apiReason)
		}
	}
}

func TestSizeDesignExample(t *testing.T) {
	got, err := Size(designSpec(), 8)
	if err != nil {
		t.Fatal(err)
	}
	// A = 50 × 80% = 40 = 5·8: permits 5, capacity 5/0.22 = 22.727/s, queue
	// floor(22.727 × 0.1) = 2, retry budget 10/8 = 1.25/s; demand 1900 × 0.22
	// = 418 in flight, 1900 × 1.8 = 3420 at worst, ceiling 40/0.22 = 181.818/s,
	// shed 1 − 40/418 = 0.904.
	wantPerPod := v1alpha1.PerPodPlan{
		Permits:              5,
		RatePerSecond:        resource.MustParse("0"),
		CapacityPerSecond:    resource.MustParse("22727m"),
		QueueCapacity:        2,
		MaxQueueWait:         metav1.Duration{Duration: 100 * time.Millisecond},
		AcquireTimeout:       metav1.Duration{Duration: 100 * time.Millisecond},
		Workers:              5,
		RetryBudgetPerSecond: resource.MustParse("1250m"),
	}
	if diff := cmp.Diff(wantPerPod, got.PerPod, quantityText); diff != "" {
		t.Errorf("PerPod mismatch (-want +got):\n%s", diff)
	}
	worst := int32(3420)
	wantDemand := &v1alpha1.DemandStatus{
		InFlight:       418,
		WorstInFlight:  &worst,
		GoodputCeiling: resource.MustParse("181818m"),
		ShedFraction:   "0.90",
	}
	if diff := cmp.Diff(wantDemand, got.Demand, quantityText); diff != "" {
		t.Errorf("Demand mismatch (-want +got):\n%s", diff)
	}
	if len(got.Diagnostics) != 1 || got.Diagnostics[0].Reason != v1alpha1.ReasonDemandExceedsQuota {
		t.Errorf("Diagnostics = %+v, want one DemandExceedsQuota", got.Diagnostics)
	}
	if got.Diagnostics[0].Message != got.Result.Diagnostics[0].Message {
		t.Errorf("status message %q differs from sizing's %q", got.Diagnostics[0].Message, got.Result.Diagnostics[0].Message)
	}

	// The status serialises as kubectl get -o yaml shows it: rates in
	// thousandths, durations as strings.
	raw, err := json.Marshal(got.PerPod)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"permits":5,"ratePerSecond":"0","burst":0,"capacityPerSecond":"22727m","queueCapacity":2,"maxQueueWait":"100ms","acquireTimeout":"100ms","workers":5,"retryBudgetPerSecond":"1250m"}`
	if string(raw) != wantJSON {
		t.Errorf("PerPod JSON\n got %s\nwant %s", raw, wantJSON)
	}
}

func TestSizeAppliesDefaults(t *testing.T) {
	spec := designSpec()
	got, err := Size(spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	if got.Input.SafetyPercent != 80 || got.Input.BelowOne != sizing.Strict {
		t.Errorf("defaults: safety %d%%, belowOne %s; want 80%%, Strict", got.Input.SafetyPercent, got.Input.BelowOne)
	}
	explicit := spec
	explicit.SafetyPercent = 80
	explicit.BelowOne = v1alpha1.BelowOneStrict
	same, err := Size(explicit, 8)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(same, got, quantityText); diff != "" {
		t.Errorf("an empty field sized differently from its default (-explicit +empty):\n%s", diff)
	}

	d := Default(spec)
	if d.SafetyPercent != DefaultSafetyPercent || d.BelowOne != DefaultBelowOne || d.WorkloadRef.APIVersion != DefaultWorkloadAPIVersion {
		t.Errorf("Default() = safety %d, belowOne %q, apiVersion %q", d.SafetyPercent, d.BelowOne, d.WorkloadRef.APIVersion)
	}
	if spec.SafetyPercent != 0 || spec.BelowOne != "" || spec.WorkloadRef.APIVersion != "" {
		t.Errorf("Default() changed its argument: %+v", spec)
	}
	d.Latency.Worst.Duration = time.Hour
	if spec.Latency.Worst.Duration == time.Hour {
		t.Errorf("Default() shares pointers with its argument")
	}
}

func TestSizeBelowOnePolicies(t *testing.T) {
	spec := designSpec()
	spec.Demand = nil
	strict, err := Size(spec, 100)
	if err != nil {
		t.Fatal(err)
	}
	if strict.PerPod.Permits != 0 || len(strict.Diagnostics) != 1 || strict.Diagnostics[0].Reason != v1alpha1.ReasonQuotaTooSmall {
		t.Errorf("Strict at 100 replicas: permits %d, diagnostics %+v; want 0 and QuotaTooSmall", strict.PerPod.Permits, strict.Diagnostics)
	}
	if strict.Demand != nil {
		t.Errorf("no demand in the spec, but Demand = %+v", strict.Demand)
	}

	spec.BelowOne = v1alpha1.BelowOneAtLeastOne
	spec.Retry = v1alpha1.RetryPolicy{}
	lenient, err := Size(spec, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.Diagnostic{{
		Reason:  v1alpha1.ReasonOvercommitted,
		Message: "50 × 80% = 40 permits over 100 replicas is 0.4 per pod; AtLeastOne raised every pod to 1 permit, so the pods together hold up to 100 in flight against a contract of 50: overcommitted by 50 (2× the contract)",
	}}
	if diff := cmp.Diff(want, lenient.Diagnostics); diff != "" || lenient.PerPod.Permits != 1 {
		t.Errorf("AtLeastOne at 100 replicas: permits %d (-want +got diagnostics):\n%s", lenient.PerPod.Permits, diff)
	}

	spec.Latency.Worst = nil
	fine, err := Size(spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	if fine.Diagnostics != nil {
		t.Errorf("a sizing without findings has Diagnostics %#v, want nil", fine.Diagnostics)
	}
}

func TestSizeRejectsInvalidSpecs(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*v1alpha1.DownstreamQuotaSpec)
		divisor int32
		want    string
	}{
		{"concurrency", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.Concurrency = 0 }, 8,
			"spec.contract.concurrency: must be at least 1, got 0"},
		{"rate", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.RatePerSecond = -5 }, 8,
			"spec.contract.ratePerSecond: must not be negative, got -5"},
		{"burst without rate", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.Burst = 5 }, 8,
			"spec.contract.burst: requires a rate greater than 0, got 5 with no rate"},
		{"safety", func(s *v1alpha1.DownstreamQuotaSpec) { s.SafetyPercent = 120 }, 8,
			"spec.safetyPercent: must be between 1 and 100, got 120"},
		{"negative safety", func(s *v1alpha1.DownstreamQuotaSpec) { s.SafetyPercent = -1 }, 8,
			"spec.safetyPercent: must be between 1 and 100, got -1"},
		{"divisor", func(*v1alpha1.DownstreamQuotaSpec) {}, 0,
			"divisor: must be at least 1, got 0"},
		{"typical latency", func(s *v1alpha1.DownstreamQuotaSpec) { s.Latency.Typical.Duration = 0 }, 8,
			"spec.latency.typical: must be greater than 0, got 0s"},
		{"worst below typical", func(s *v1alpha1.DownstreamQuotaSpec) { s.Latency.Worst.Duration = 100 * time.Millisecond }, 8,
			"spec.latency.worst: must not be below the typical latency 220ms, got 100ms"},
		{"deadline", func(s *v1alpha1.DownstreamQuotaSpec) { s.Deadline.Duration = -time.Second }, 8,
			"spec.deadline: must be greater than 0, got -1s"},
		{"max queue wait negative", func(s *v1alpha1.DownstreamQuotaSpec) { s.MaxQueueWait.Duration = -time.Millisecond }, 8,
			"spec.maxQueueWait: must not be negative, got -1ms"},
		{"max queue wait not below deadline", func(s *v1alpha1.DownstreamQuotaSpec) { s.MaxQueueWait.Duration = 2 * time.Second }, 8,
			"spec.maxQueueWait: must be less than deadline 2s, got 2s"},
		{"acquire timeout", func(s *v1alpha1.DownstreamQuotaSpec) { s.AcquireTimeout.Duration = -time.Second }, 8,
			"spec.acquireTimeout: must not be negative, got -1s"},
		{"demand", func(s *v1alpha1.DownstreamQuotaSpec) { s.Demand.RatePerSecond = 0 }, 8,
			"spec.demand: at least one of ratePerSecond and inFlight must be given"},
		{"negative demand", func(s *v1alpha1.DownstreamQuotaSpec) { s.Demand.RatePerSecond = -1 }, 8,
			"spec.demand.ratePerSecond: must not be negative, got -1"},
		{"demand in flight", func(s *v1alpha1.DownstreamQuotaSpec) { s.Demand = &v1alpha1.Demand{InFlight: ptr[int32](0)} }, 8,
			"spec.demand.inFlight: must be at least 1, got 0"},
		{"no contract", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract = nil }, 8,
			"spec.contract: required: a quota names its contract, or its workload's part of a shared one comes from spec.contractRef"},
		{"contract and contractRef", func(s *v1alpha1.DownstreamQuotaSpec) {
			s.ContractRef = &v1alpha1.ContractReference{Name: "logistics"}
		}, 8,
			`spec.contractRef: must not be given with spec.contract: exactly one of them, got contractRef "logistics"`},
		{"cluster share with neither", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.ClusterShare = &v1alpha1.ClusterShare{} }, 8,
			"spec.contract.clusterShare: exactly one of concurrency and percent must be given"},
		{"cluster share with both", func(s *v1alpha1.DownstreamQuotaSpec) {
			s.Contract.ClusterShare = &v1alpha1.ClusterShare{Concurrency: ptr[int32](10), Percent: ptr[int32](10)}
		}, 8,
			"spec.contract.clusterShare: exactly one of concurrency and percent must be given"},
		{"cluster share above the contract", func(s *v1alpha1.DownstreamQuotaSpec) {
			s.Contract.ClusterShare = &v1alpha1.ClusterShare{Concurrency: ptr[int32](51)}
		}, 8,
			"spec.contract.clusterShare.concurrency: must be between 1 and the contract's concurrency 50, got 51"},
		{"cluster share of 0", func(s *v1alpha1.DownstreamQuotaSpec) {
			s.Contract.ClusterShare = &v1alpha1.ClusterShare{Concurrency: ptr[int32](0)}
		}, 8,
			"spec.contract.clusterShare.concurrency: must be between 1 and the contract's concurrency 50, got 0"},
		{"cluster share percent", func(s *v1alpha1.DownstreamQuotaSpec) {
			s.Contract.ClusterShare = &v1alpha1.ClusterShare{Percent: ptr[int32](101)}
		}, 8,
			"spec.contract.clusterShare.percent: must be between 1 and 100, got 101"},
		{"retries", func(s *v1alpha1.DownstreamQuotaSpec) { s.Retry.MaxRetries = 11 }, 8,
			"spec.retry.maxRetries: must be at most 10, got 11"},
		{"negative retries", func(s *v1alpha1.DownstreamQuotaSpec) { s.Retry.MaxRetries = -1 }, 8,
			"spec.retry.maxRetries: must be at least 0, got -1"},
		{"retry budget", func(s *v1alpha1.DownstreamQuotaSpec) { s.Retry.BudgetPerSecond = -1 }, 8,
			"spec.retry.budgetPerSecond: must not be negative, got -1"},
		{"below one", func(s *v1alpha1.DownstreamQuotaSpec) { s.BelowOne = "Lenient" }, 8,
			`spec.belowOne: must be Strict or AtLeastOne, got "Lenient"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := designSpec()
			tt.change(&spec)
			got, err := Size(spec, tt.divisor)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Size() error = %v, want a *FieldError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("Size() error = %q, want %q", err, tt.want)
			}
			if diff := cmp.Diff(Sizing{}, got, quantityText); diff != "" {
				t.Errorf("Size() returned a sizing with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	in, got, err := Sweep(designSpec(), 2, 60)
	if err != nil {
		t.Fatal(err)
	}
	if in.Divisor != 2 || len(got.Rows) != 59 || got.FirstBelowOne != 41 {
		t.Errorf("Sweep(2..60): divisor %d, %d rows, first below one %d; want 2, 59, 41", in.Divisor, len(got.Rows), got.FirstBelowOne)
	}
	// Every row is what Size gives for that divisor.
	for _, row := range got.Rows {
		s, err := Size(designSpec(), int32(row.Replicas))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.Result, row.Result); diff != "" {
			t.Fatalf("row %d differs from Size (-size +sweep):\n%s", row.Replicas, diff)
		}
	}

	for _, tt := range []struct {
		lo, hi int32
		want   string
	}{
		{0, 4, "minReplicas: must be at least 1, got 0"},
		{5, 4, "maxReplicas: must be at least 5, got 4"},
	} {
		if _, _, err := Sweep(designSpec(), tt.lo, tt.hi); err == nil || err.Error() != tt.want {
			t.Errorf("Sweep(%d, %d) error = %v, want %q", tt.lo, tt.hi, err, tt.want)
		}
	}
	bad := designSpec()
	bad.Contract = &v1alpha1.Contract{}
	if _, _, err := Sweep(bad, 1, 4); err == nil || err.Error() != "spec.contract.concurrency: must be at least 1, got 0" {
		t.Errorf("Sweep of an invalid spec: error = %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestClusterConcurrency(t *testing.T) {
	for _, tt := range []struct {
		share *v1alpha1.ClusterShare
		want  int32
	}{
		{nil, 50},
		{&v1alpha1.ClusterShare{Concurrency: ptr[int32](20)}, 20},
		{&v1alpha1.ClusterShare{Concurrency: ptr[int32](80)}, 50},
		{&v1alpha1.ClusterShare{Percent: ptr[int32](30)}, 15},
		{&v1alpha1.ClusterShare{Percent: ptr[int32](33)}, 16}, // 16.5 rounded down
		{&v1alpha1.ClusterShare{Percent: ptr[int32](1)}, 1},   // 0.5, but at least 1
		{&v1alpha1.ClusterShare{Percent: ptr[int32](100)}, 50},
	} {
		c := v1alpha1.Contract{Concurrency: 50, ClusterShare: tt.share}
		if got := ClusterConcurrency(c); got != tt.want {
			t.Errorf("ClusterConcurrency(%+v) = %d, want %d", tt.share, got, tt.want)
		}
	}
}

func TestSizeClusterShare(t *testing.T) {
	spec := designSpec()
	spec.Demand = nil
	spec.Contract.ClusterShare = &v1alpha1.ClusterShare{Percent: ptr[int32](40)}
	// 20 of 50 for this cluster × 80% = 16 = 5·3 + 1.
	got, err := Size(spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Result; got.Input.ClusterConcurrency != 20 || r.Usable != 16 || r.Base != 5 || r.Extra != 1 || got.PerPod.Permits != 5 {
		t.Errorf("cluster share 40%%: C' %d, A %d, base %d, extra %d, per pod %d; want 20, 16, 5, 1, 5",
			got.Input.ClusterConcurrency, r.Usable, r.Base, r.Extra, got.PerPod.Permits)
	}
}

func TestSizeDemandInFlight(t *testing.T) {
	// Little's law backwards: 418 in flight at 220ms is 1900/s, the same
	// sizing as the rate.
	byRate, err := Size(designSpec(), 8)
	if err != nil {
		t.Fatal(err)
	}
	spec := designSpec()
	spec.Demand = &v1alpha1.Demand{InFlight: ptr[int32](418)}
	byInFlight, err := Size(spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(byRate, byInFlight, quantityText); diff != "" {
		t.Errorf("demand inFlight 418 sized differently from 1900/s (-rate +inFlight):\n%s", diff)
	}
	// The status shows the in-flight calls given, never one more from a
	// rounding of L/W·W: every L and a spread of latencies.
	for l := int32(1); l <= 500; l++ {
		for w := time.Millisecond; w <= 3*time.Second; w += 37*time.Millisecond + 13 {
			spec := designSpec()
			spec.Latency = v1alpha1.Latency{Typical: metav1.Duration{Duration: w}}
			spec.Deadline = metav1.Duration{Duration: 10 * time.Second}
			spec.MaxQueueWait = nil
			spec.Demand = &v1alpha1.Demand{InFlight: ptr(l)}
			got, err := Size(spec, 8)
			if err != nil {
				t.Fatal(err)
			}
			if got.Demand.InFlight != l {
				t.Fatalf("demand inFlight %d at %s: status shows %d", l, w, got.Demand.InFlight)
			}
		}
	}
}

func sharedSpec() v1alpha1.DownstreamQuotaSpec {
	spec := designSpec()
	spec.Contract = nil
	spec.ContractRef = &v1alpha1.ContractReference{Name: "logistics"}
	spec.Demand = nil
	spec.Retry = v1alpha1.RetryPolicy{MaxRetries: 1}
	spec.Latency.Worst = nil
	return spec
}

func sharedContract() v1alpha1.DownstreamContractSpec {
	return v1alpha1.DownstreamContractSpec{
		Downstream: "logistics.example.com",
		Contract:   v1alpha1.Contract{Concurrency: 50, RatePerSecond: 100, Burst: 20},
	}
}

func TestSizePart(t *testing.T) {
	// A caller's part of 21 of the 40 usable permits over 4 pods: 5·4 + 1.
	part := sizing.Part{Permits: 21, RatePerSecond: 42, Burst: 8, RetryBudgetPerSecond: 2.1}
	got, err := SizePart(sharedSpec(), sharedContract(), part, 4)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Result
	if r.Usable != 21 || r.Base != 5 || r.Extra != 1 || r.PerPodExtra == nil || r.PerPodExtra.Permits != 6 {
		t.Fatalf("part of 21 over 4: A %d, base %d, extra %d, extra share %+v; want 21, 5, 1, 6 permits", r.Usable, r.Base, r.Extra, r.PerPodExtra)
	}
	// 42/s × 5/21 = 10/s, burst floor(8 × 5/21) = 1, retries 2.1 × 5/21 = 0.5/s.
	if got.PerPod.RatePerSecond.String() != "10" || got.PerPod.Burst != 1 || got.PerPod.RetryBudgetPerSecond.String() != "500m" {
		t.Errorf("per pod rate %s, burst %d, retry budget %s; want 10, 1, 500m", &got.PerPod.RatePerSecond, got.PerPod.Burst, &got.PerPod.RetryBudgetPerSecond)
	}
	if got.Input.SafetyPercent != 80 {
		t.Errorf("safety %d%%, want the default 80%% of the DownstreamContract", got.Input.SafetyPercent)
	}
	// The part's retry budget is what the pods spend: no RetriesWithoutBudget.
	if got.Diagnostics != nil {
		t.Errorf("Diagnostics = %+v, want none", got.Diagnostics)
	}
}

func TestSizePartRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		name     string
		spec     func(*v1alpha1.DownstreamQuotaSpec)
		contract func(*v1alpha1.DownstreamContractSpec)
		part     sizing.Part
		want     string
	}{
		{"part above the usable permits", nil, nil, sizing.Part{Permits: 41},
			"part.permits: must not exceed the contract's usable 40 permits, got 41"},
		{"negative part", nil, nil, sizing.Part{Permits: -1},
			"part.permits: must be at least 0, got -1"},
		{"part burst without rate", nil, nil, sizing.Part{Permits: 1, Burst: 2},
			"part.burst: requires a rate greater than 0, got 2 with no rate"},
		{"part retry budget", nil, nil, sizing.Part{Permits: 1, RetryBudgetPerSecond: -1},
			"part.retryBudgetPerSecond: must not be negative, got -1"},
		{"quota with its own contract", func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract = &v1alpha1.Contract{Concurrency: 5} }, nil, sizing.Part{},
			"spec.contract: must not be given with a shared contract: the quota's part comes from its DownstreamContract"},
		{"contract concurrency", nil, func(c *v1alpha1.DownstreamContractSpec) { c.Contract.Concurrency = 0 }, sizing.Part{},
			"downstreamContract.spec.contract.concurrency: must be at least 1, got 0"},
		{"contract safety", nil, func(c *v1alpha1.DownstreamContractSpec) { c.SafetyPercent = 101 }, sizing.Part{},
			"downstreamContract.spec.safetyPercent: must be between 1 and 100, got 101"},
		{"contract cluster share", nil, func(c *v1alpha1.DownstreamContractSpec) {
			c.Contract.ClusterShare = &v1alpha1.ClusterShare{Percent: ptr[int32](0)}
		}, sizing.Part{},
			"downstreamContract.spec.contract.clusterShare.percent: must be between 1 and 100, got 0"},
		{"quota latency", func(s *v1alpha1.DownstreamQuotaSpec) { s.Latency.Typical.Duration = 0 }, nil, sizing.Part{},
			"spec.latency.typical: must be greater than 0, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, contract := sharedSpec(), sharedContract()
			if tt.spec != nil {
				tt.spec(&spec)
			}
			if tt.contract != nil {
				tt.contract(&contract)
			}
			got, err := SizePart(spec, contract, tt.part, 4)
			var fe *FieldError
			if !errors.As(err, &fe) || err.Error() != tt.want {
				t.Fatalf("SizePart() error = %v, want the *FieldError %q", err, tt.want)
			}
			if diff := cmp.Diff(Sizing{}, got, quantityText); diff != "" {
				t.Errorf("SizePart() returned a sizing with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuantity(t *testing.T) {
	for f, want := range map[float64]string{
		0:        "0",
		1.25:     "1250m",
		10:       "10",
		5 / 0.22: "22727m",
		0.0004:   "0",
		2.1e18:   "2100P", // whole units, where thousandths would overflow
	} {
		q := Quantity(f)
		if got := q.String(); got != want {
			t.Errorf("Quantity(%v) = %s, want %s", f, got, want)
		}
	}
}
