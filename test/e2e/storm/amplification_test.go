package storm

import (
	"math"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

func TestRetryAmplification(t *testing.T) {
	s := Schedule{
		Duration: 12 * time.Second, RequestsPerSecond: 100, InitialReplicas: 1,
		Latency: []LatencyStep{{At: 0, Latency: TypicalLatency}},
		Phases:  []Phase{{Name: "only", From: 0, To: 12 * time.Second, Settle: 2 * time.Second}},
	}
	// The window is [2s, 12s): 300 calls arrive, 250 of them rejected, 10
	// still in flight at its end.
	samples := []Sample{
		{At: 2 * time.Second, Downstream: DownstreamCounts{OK: 5, Rejected: 20, InFlight: 3}},
		{At: 12 * time.Second, Downstream: DownstreamCounts{OK: 46, Rejected: 270, Abandoned: 2, InFlight: 10}},
	}
	var records []Record
	for i, o := range map[Outcome]int{OutcomeOK: 100, OutcomeDownstreamError: 50, OutcomeShed: 10} {
		for range o {
			records = append(records, Record{At: 5 * time.Second, Outcome: i})
		}
	}
	// Before the window: neither a request nor an attempt of it.
	records = append(records, Record{At: time.Second, Outcome: OutcomeOK})
	unbudgeted := &plan.Document{RetryBudgetPerSecond: 100}
	d := &RunData{Variant: Variant{Name: "naive", Plan: unbudgeted}, Schedule: s, Samples: samples, Load: &LoadResult{Records: records}}

	got := retryAmplification(d)
	if len(got) != 1 {
		t.Fatalf("phases: got %d, want 1", len(got))
	}
	a := got[0]
	if a.Requests != 150 || a.Shed != 10 || a.Attempts != 300 || a.Rejected != 250 || a.MeasuredSeconds != 10 {
		t.Errorf("counts: %+v; want 150 requests, 10 shed, 300 attempts, 250 rejected over 10s", a)
	}
	if a.Measured != 2 || math.Abs(a.MeasuredRejection-250.0/300) > 1e-12 {
		t.Errorf("measured %v, rejection %v; want 2, 250/300", a.Measured, a.MeasuredRejection)
	}
	m, err := sizing.Amplification(sizing.RetryLoad{CapacityPerSecond: float64(Contract) / TypicalLatency.Seconds(), ArrivalPerSecond: 15, MaxRetries: GatewayMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	if a.ArrivalPerSecond != 15 || a.FixedPoint != m.FixedPoint.Amplification || a.SingleRound != m.SingleRound.Amplification || a.FixedPointRejection != m.FixedPoint.Rejection {
		t.Errorf("model: %+v; want arrival 15/s and %+v", a, m.FixedPoint)
	}
	if a.Agrees() {
		t.Errorf("measured 2 against a model of %.3f agrees", a.FixedPoint)
	}
	if want := "kubectl backpressure retry --capacity 227.3 --arrival 15.0 --retries 1"; a.Command() != want {
		t.Errorf("command %q, want %q", a.Command(), want)
	}

	// Retries a budget limits are not what the model describes.
	d.Variant.Plan = &plan.Document{RetryBudgetPerSecond: 1}
	if got := retryAmplification(d); got != nil {
		t.Errorf("a budgeted run: got %+v, want nil", got)
	}
}

func TestAmplificationGoals(t *testing.T) {
	v := &VariantReport{Name: "naive", RetryAmplification: []PhaseAmplification{
		{Phase: "a", Requests: 100, Attempts: 194, Measured: 1.94, FixedPoint: 1.93, MeasuredRejection: 0.94, FixedPointRejection: 0.93},
		{Phase: "b", Requests: 100, Attempts: 200, Measured: 2.0, FixedPoint: 1.93, MeasuredRejection: 0.99, FixedPointRejection: 0.93},
	}}
	type goal struct {
		name          string
		met, asserted bool
	}
	var got []goal
	amplificationGoals(func(_, g, _, _ string, met, asserted bool) { got = append(got, goal{g, met, asserted}) }, "naive", v)
	want := []goal{
		{"rejected fraction of attempts in phase a", true, true},
		{"attempts per request in phase a", true, false},
		{"rejected fraction of attempts in phase b", false, true},
		{"attempts per request in phase b", false, false},
	}
	if len(got) != len(want) {
		t.Fatalf("goals %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("goal %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var none []goal
	amplificationGoals(func(_, g, _, _ string, met, asserted bool) { none = append(none, goal{g, met, asserted}) }, "naive", &VariantReport{})
	if len(none) != 1 || none[0].met || !none[0].asserted {
		t.Errorf("a run without figures: %+v, want one asserted goal not met", none)
	}
}
