package report

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

func TestRetryAmplification(t *testing.T) {
	s := schedule.Schedule{
		Duration: 12 * time.Second, RequestsPerSecond: 100, InitialReplicas: 1,
		Latency: []schedule.LatencyStep{{At: 0, Latency: story.TypicalLatency}},
		Phases:  []schedule.Phase{{Name: "only", From: 0, To: 12 * time.Second, Settle: 2 * time.Second}},
	}
	// The window is [2s, 12s): 300 calls arrive, 250 of them rejected, 10
	// still in flight at its end.
	samples := []Sample{
		{At: 2 * time.Second, Downstream: traffic.DownstreamCounts{OK: 5, Rejected: 20, InFlight: 3}},
		{At: 12 * time.Second, Downstream: traffic.DownstreamCounts{OK: 46, Rejected: 270, Abandoned: 2, InFlight: 10}},
	}
	var records []traffic.Record
	for i, o := range map[traffic.Outcome]int{traffic.OutcomeOK: 100, traffic.OutcomeDownstreamError: 50, traffic.OutcomeShed: 10} {
		for range o {
			records = append(records, traffic.Record{At: 5 * time.Second, Outcome: i})
		}
	}
	// Before the window: neither a request nor an attempt of it.
	records = append(records, traffic.Record{At: time.Second, Outcome: traffic.OutcomeOK})
	unbudgeted := &plan.Document{RetryBudgetPerSecond: 100}
	d := &RunData{Name: "naive", Plan: unbudgeted, Downstream: story, MaxRetries: 1, Schedule: s, Samples: samples, Load: &traffic.LoadResult{Records: records}}

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
	m, err := sizing.Amplification(sizing.RetryLoad{CapacityPerSecond: 50 / 0.22, ArrivalPerSecond: 15, MaxRetries: 1})
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
	d.Plan = &plan.Document{RetryBudgetPerSecond: 1}
	if got := retryAmplification(d); got != nil {
		t.Errorf("a budgeted run: got %+v, want nil", got)
	}
}

func TestAmplificationGoals(t *testing.T) {
	v := &VariantReport{Name: "naive", RetryAmplification: []PhaseAmplification{
		{Phase: "a", Requests: 100, Attempts: 194, Measured: 1.94, FixedPoint: 1.93, MeasuredRejection: 0.94, FixedPointRejection: 0.93},
		{Phase: "b", Requests: 100, Attempts: 200, Measured: 2.0, FixedPoint: 1.93, MeasuredRejection: 0.99, FixedPointRejection: 0.93},
		{Phase: "c", Requests: 100, Shed: 2, Attempts: 200, Measured: 2.0, FixedPoint: 1.93, MeasuredRejection: 0.93, FixedPointRejection: 0.93},
	}}
	type goal struct {
		name          string
		met, asserted bool
	}
	var gs Goals
	gs.Amplification("naive", v)
	var got []goal
	for _, g := range gs {
		got = append(got, goal{g.Goal, g.Met, g.Asserted})
	}
	want := []goal{
		{"rejected fraction of attempts in phase a", true, true},
		{"attempts per request in phase a", true, true},
		{"rejected fraction of attempts in phase b", false, true},
		{"attempts per request in phase b", false, true},
		// 2 % of the requests shed: reported, not asserted.
		{"rejected fraction of attempts in phase c", true, true},
		{"attempts per request in phase c", false, false},
	}
	if len(got) != len(want) {
		t.Fatalf("goals %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("goal %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	var none Goals
	none.Amplification("naive", &VariantReport{})
	if len(none) != 1 || none[0].Met || !none[0].Asserted {
		t.Errorf("a run without figures: %+v, want one asserted goal not met", none)
	}
}

// simulateRetries runs a downstream of slots calls in flight, each held for
// service, with no queue, offered Poisson first attempts at arrival per
// second for d (simulated); a rejected first attempt is retried once after
// a uniform delay in [0, jitter), as the gateway's retry does. It returns the
// attempts per first attempt.
func simulateRetries(seed uint64, slots int, service time.Duration, arrival float64, jitter, d time.Duration) float64 {
	rnd := rand.New(rand.NewPCG(seed, seed))
	type event struct {
		at    time.Duration
		retry bool
	}
	var arrivals []event
	for t := time.Duration(0); ; {
		t += time.Duration(rnd.ExpFloat64() / arrival * float64(time.Second))
		if t >= d {
			break
		}
		arrivals = append(arrivals, event{at: t})
	}
	var retries []event      // pending retries, kept sorted by time
	var ends []time.Duration // the ends of the calls in flight, sorted
	first, attempts := len(arrivals), 0
	for len(arrivals) > 0 || len(retries) > 0 {
		var ev event
		if len(retries) == 0 || (len(arrivals) > 0 && arrivals[0].at <= retries[0].at) {
			ev, arrivals = arrivals[0], arrivals[1:]
		} else {
			ev, retries = retries[0], retries[1:]
		}
		attempts++
		for len(ends) > 0 && ends[0] <= ev.at {
			ends = ends[1:]
		}
		if len(ends) < slots {
			end := ev.at + service
			i, _ := slices.BinarySearch(ends, end)
			ends = slices.Insert(ends, i, end)
			continue
		}
		if !ev.retry {
			r := event{at: ev.at + time.Duration(rnd.Float64()*float64(jitter)), retry: true}
			i, _ := slices.BinarySearchFunc(retries, r, func(a, b event) int { return cmp.Compare(a.at, b.at) })
			retries = slices.Insert(retries, i, r)
		}
	}
	return float64(attempts) / float64(first)
}

// The model of kubectl backpressure retry holds for the downstream the storm
// runs: Poisson first attempts, a retry after the gateway's jittered
// backoff, at the storm's capacities and arrival rates.
func TestAmplificationModelAgainstSimulation(t *testing.T) {
	for _, tc := range []struct {
		latency time.Duration
		arrival float64
	}{
		{story.TypicalLatency, 1900},
		{story.TypicalLatency, 1050},
		{1800 * time.Millisecond, 1900}, // the story's downstream during its deploys
	} {
		capacity := float64(story.Contract) / tc.latency.Seconds()
		m, err := sizing.Amplification(sizing.RetryLoad{CapacityPerSecond: capacity, ArrivalPerSecond: tc.arrival, MaxRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := simulateRetries(1, story.Contract, tc.latency, tc.arrival, 25*time.Millisecond, 30*time.Second)
		if math.Abs(got-m.FixedPoint.Amplification) > AmplificationTolerance {
			t.Errorf("latency %v, arrival %.0f/s: simulated %.3f attempts per request, model %.3f", tc.latency, tc.arrival, got, m.FixedPoint.Amplification)
		}
	}
}
