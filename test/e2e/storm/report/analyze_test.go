package report

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

func TestReloadLatencies(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	published := []observe.Published{{Seen: at(0), Hash: "h1"}, {Seen: at(1000), Hash: "h2"}, {Seen: at(2000), Hash: "h3"}}
	applied := []observe.Applied{
		{Pod: "a", Time: at(10), Hash: "h1"},   // a's start: not a reload
		{Pod: "a", Time: at(1040), Hash: "h2"}, // 40ms
		{Pod: "a", Time: at(1041), Hash: "h2"}, // the same plan again: counted once
		// A lapse of a's source and its end: h2 again, with the permits
		// then in force, and no reload.
		{Pod: "a", Time: at(1500), Hash: "h2", Permits: 0},
		{Pod: "a", Time: at(1700), Hash: "h2", Permits: 5},
		{Pod: "b", Time: at(1500), Hash: "h2"}, // b started after h2 was out: its start
		{Pod: "b", Time: at(2300), Hash: "h3"}, // 300ms
		{Pod: "a", Time: at(1999), Hash: "h3"}, // a hair ahead of the harness: 0
		{Pod: "c", Time: at(50), Hash: "hx"},   // a plan the harness never saw
	}
	got := ReloadLatencies(published, applied)
	want := []time.Duration{40 * time.Millisecond, 300 * time.Millisecond, 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReloadLatencies (-want +got):\n%s", diff)
	}
}

func TestScaleSteps(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	d := &RunData{
		Schedule: schedule.Schedule{Duration: 70 * time.Second},
		Start:    start,
		Scales:   []cluster.ScaleEvent{{At: at(25000), From: 8, To: 16}, {At: at(45000), From: 16, To: 4}},
		Published: []observe.Published{
			{Seen: at(-1000), Hash: "n8", Permits: 5},
			{Seen: at(25030), Hash: "n16", Pods: map[string]int{"old": 3, "new": 2}},
			{Seen: at(45600), Hash: "n10", Permits: 4},
			{Seen: at(45800), Hash: "n4", Pods: map[string]int{"old": 20, "new": 20}},
		},
		Applied: []observe.Applied{
			{Pod: "old", Time: at(-900), Hash: "n8"},
			{Pod: "old", Time: at(25040), Hash: "n16"},
			{Pod: "new", Time: at(26900), Hash: "n16"}, // started after the decision
			{Pod: "old", Time: at(45610), Hash: "n10"},
			{Pod: "new", Time: at(45620), Hash: "n10"},
			{Pod: "old", Time: at(45810), Hash: "n4"},
			{Pod: "new", Time: at(45830), Hash: "n4"},
			// A lapse of new's source and its end log n4 again: not when
			// it applied the plan.
			{Pod: "new", Time: at(47000), Hash: "n4", Permits: 0},
			{Pod: "new", Time: at(48000), Hash: "n4", Permits: 20},
		},
	}
	want := []ScaleStepReport{
		{At: 25, From: 8, To: 16, Plans: 1, FirstPlanSeconds: 0.03, SettledPlanSeconds: 0.03, SettledHandedOut: 5,
			AppliedBy: 1, AppliedP50Seconds: 0.04, AppliedMaxSeconds: 0.04},
		{At: 45, From: 16, To: 4, Plans: 2, FirstPlanSeconds: 0.6, SettledPlanSeconds: 0.8, SettledHandedOut: 40,
			AppliedBy: 2, AppliedP50Seconds: 0.81, AppliedMaxSeconds: 0.83},
	}
	if diff := cmp.Diff(want, scaleSteps(d), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("scaleSteps (-want +got):\n%s", diff)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := Percentile(ds, 0.5); got != 50*time.Millisecond {
		t.Errorf("p50 = %v", got)
	}
	if got := Percentile(ds, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 = %v", got)
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
	q := QuantilesOf([]time.Duration{3, 1, 2})
	if q != (Quantiles{Count: 3, P50: 2, P99: 3, Max: 3}) {
		t.Errorf("QuantilesOf = %+v", q)
	}
}
