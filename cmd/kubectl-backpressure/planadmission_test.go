package main

import (
	"math"
	"strings"
	"testing"
)

// noRoom is a contract of 20 in flight (16 usable) over 4 pods of 4 without
// a waiting room: each pod under a random balancer is then Erlang's loss
// system, so the figures have closed forms.
var noRoom = []string{"plan", "--concurrency", "20", "--latency", "100ms", "--deadline", "1s", "--max-queue-wait", "0s", "--replicas", "4"}

func TestPlanAdmissionJSON(t *testing.T) {
	var got planAdmissionJSON
	runJSON(t, &got, append(noRoom, "--offered-load", "80%", "--reserve", "25%")...)
	a := got.Admission
	if got.Usable != 16 || a.OfferedLoad != 0.8 || a.CallsPerSecond != 128 || a.Balancer != "random" || a.Skew != nil {
		t.Fatalf("plan %d usable, admission %+v: want 16 usable at 80%% = 128 calls/s, random, no skew", got.Usable, a)
	}
	// Erlang's B by hand: one gate of 16 at 12.8 Erlangs blocks 8.06 %; a
	// pod of 4 at 3.2 Erlangs blocks 22.81 %.
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.006 {
			t.Errorf("%s = %.4f, want %.4f (Erlang B)", what, got, want)
		}
	}
	near("global gate", a.GlobalGate, 0.9194)
	if len(a.Rows) != 4 {
		t.Fatalf("rows %+v: want equal and demand, without and with the reserve", a.Rows)
	}
	for _, r := range a.Rows[:2] {
		near(r.Shares+" shares, admitted", r.Admitted, 0.7719)
		near(r.Shares+" shares, of the global gate", r.RatioToGlobalGate, 0.7719/0.9194)
	}
	for _, r := range a.Rows[2:] {
		if r.Reserve != 4 || r.BorrowedFraction <= 0 || r.Admitted <= a.Rows[0].Admitted+0.02 {
			t.Errorf("%s shares with 25%% reserved: %+v: want 4 in the reserve, some calls borrowed, more admitted than without", r.Shares, r)
		}
		if sum := r.PerPod[0] + r.PerPod[1] + r.PerPod[2] + r.PerPod[3]; sum != 12 {
			t.Errorf("%s shares with a reserve of 4: pods hold %v, want 12 in all", r.Shares, r.PerPod)
		}
	}
	// The operator keeps every pod a permit of its own, so the reserve is
	// at most 16 − 4 = 12: that reaches 98.6 %, not 99 %.
	z := a.SmallestReserve
	if z.Found || z.Target != 0.99 || z.Reserve != 12 || z.RatioToGlobalGate < 0.98 || z.RatioToGlobalGate >= 0.99 {
		t.Errorf("smallest reserve %+v: want none found, the largest reserve 12 reaching between 98%% and 99%%", z)
	}
	runJSON(t, &got, append(noRoom, "--offered-load", "80%", "--reserve-target", "98%")...)
	z = got.Admission.SmallestReserve
	if !z.Found || z.Target != 0.98 || z.RatioToGlobalGate < 0.98 || z.Reserve < 5 || z.Reserve > 12 {
		t.Errorf("smallest reserve %+v: want one above the 4 that reach 92%%, reaching 98%%", z)
	}
}

// TestPlanAdmissionSample predicts the sample quota (40 usable over 8 pods,
// a 40 ms waiting room, 220 ms latency) at 80 % with a reserve of 8. The
// pods' waiting rooms count the reserve as the operator publishes them,
// floor((4 + 8) × 40 / 220) = 2, so a reserve of 8 reaches 94.1 % of one
// gate (91.0 % were they sized by the pods' own 4 permits, a room of 0:
// internal/lossmodel's TestWaitingRoomCountsTheReserve), and 23 reach
// 99 % (about 27 with rooms of own permits: TestReserveForTheIssueGoals).
func TestPlanAdmissionSample(t *testing.T) {
	wantLines(t, []string{"plan", "-f", "testdata/sample-quota.yaml", "--replicas", "8", "--offered-load", "80%", "--reserve", "8"},
		"one gate of 40 - 99.5% 100% - 40",
		"equal 0 80.1% 80.5% - 5",
		"equal 8 93.7% 94.1% 23.4% 4",
		"demand-following 8 93.7% 94.1% 23.4% 4",
		"Smallest reserve for 99.0% of one gate with demand-following shares: 23 permits of 40 (99.1% of one gate, 58.3% of the admitted calls borrowed).",
	)
}

// TestPlanAdmissionLendRules predicts the storm's partial load (the sample
// at 80 %, a reserve of 10, pods returning loans early and asking after
// 10 ms): internal/lossmodel says 98.1 % of one gate with 46.0 % of the
// admitted calls borrowed, against 95.2 % and 28.5 % by the default rule;
// and 15 permits reach 99 %, against 23.
func TestPlanAdmissionLendRules(t *testing.T) {
	sample := []string{"plan", "-f", "testdata/sample-quota.yaml", "--replicas", "8", "--offered-load", "80%", "--reserve", "10"}
	wantLines(t, append(sample, "--return-early", "--ask-after", "10ms"),
		"Admission at 80.0% of usable / latency (145.45/s), random balancer, lognormal latency cv 0.5, loans returned early, asking the permit server after 10ms; a simulation of 200000 calls, seed 1:",
		"demand-following 10 97.6% 98.1% 46.0% 3 to 4",
		"Smallest reserve for 99.0% of one gate with demand-following shares: 15 permits of 40 (99.1% of one gate, 59.3% of the admitted calls borrowed).",
	)
	wantLines(t, sample, "demand-following 10 94.7% 95.2% 28.5% 3 to 4")
}

// TestPlanAdmissionOffer predicts the storm's partial load with the pods
// offering their idle permits (a reserve of 6, loans returned early,
// asking after 10 ms): internal/lossmodel says 99.4 % of one gate with
// 44.0 % of the admitted calls borrowed, where without offers the same
// reserve gives 95.5 %; even without a reserve, offers alone reach 97.8 %.
// A pod keeping a permit for its own calls admits less.
func TestPlanAdmissionOffer(t *testing.T) {
	sample := []string{"plan", "-f", "testdata/sample-quota.yaml", "--replicas", "8", "--offered-load", "80%", "--reserve", "6", "--return-early", "--ask-after", "10ms"}
	wantLines(t, append(sample, "--offer"),
		"Admission at 80.0% of usable / latency (145.45/s), random balancer, lognormal latency cv 0.5, loans returned early, asking the permit server after 10ms, idle permits offered (each pod keeping 0); a simulation of 200000 calls, seed 1:",
		"demand-following 0 97.3% 97.8% 40.1% 5",
		"demand-following 6 98.9% 99.4% 44.0% 4 to 5",
		"Smallest reserve for 99.0% of one gate with demand-following shares: 2 permits of 40 (99.0% of one gate, 35.9% of the admitted calls borrowed).",
	)
	wantLines(t, sample, "demand-following 6 95.0% 95.5% 32.7% 4 to 5")
	var got planAdmissionJSON
	runJSON(t, &got, append(sample, "--offer", "--offer-keep", "1")...)
	if !got.Admission.Offer || got.Admission.OfferKeep != 1 {
		t.Errorf("admission offer %v, keep %d; want true, 1", got.Admission.Offer, got.Admission.OfferKeep)
	}
	last := got.Admission.Rows[len(got.Admission.Rows)-1]
	if last.RatioToGlobalGate >= 0.994 || last.OfferedFraction <= 0 || last.OfferedFraction >= last.BorrowedFraction {
		t.Errorf("keeping 1: ratio %.4f (want below offering all, 0.994), offered %.3f of %.3f borrowed (want some, fewer)", last.RatioToGlobalGate, last.OfferedFraction, last.BorrowedFraction)
	}
}

func TestPlanAdmissionPinned(t *testing.T) {
	var got planAdmissionJSON
	runJSON(t, &got, append(noRoom, "--offered-load", "0.8", "--balancer", "pinned", "--skew", "1", "--seed", "4")...)
	a := got.Admission
	equal, demand := a.Rows[0], a.Rows[1]
	if a.Skew == nil || *a.Skew != 1 || a.Seed != 4 {
		t.Errorf("admission %+v: want skew 1, seed 4", a)
	}
	if demand.Admitted < equal.Admitted+0.02 {
		t.Errorf("pinned: demand-following shares %v admit %.3f, equal shares %v %.3f: want more", demand.PerPod, demand.Admitted, equal.PerPod, equal.Admitted)
	}
}

// wantLines runs the plugin with args and checks that its output has every
// line of want, up to spacing.
func wantLines(t *testing.T, args []string, want ...string) {
	t.Helper()
	out, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, w := range want {
		if !containsSpaced(out, w) {
			t.Errorf("plan's table lacks %q:\n%s", w, out)
		}
	}
}

func TestPlanAdmissionTable(t *testing.T) {
	wantLines(t, append(noRoom, "--offered-load", "80%", "--reserve", "4"),
		"Admission at 80.0% of usable / latency (128/s), random balancer, lognormal latency cv 0.5; a simulation of 200000 calls, seed 1:",
		"SHARES RESERVE ADMITTED OF ONE GATE BORROWED PERMITS PER POD",
		"one gate of 16 - 92.0% 100% - 16",
		"equal 0 77.2% 83.9% - 4",
		"demand-following 4 ",
		"No reserve reaches 99.0% of one gate with demand-following shares: the largest, 12 permits of 16 (every pod keeps a permit of its own), reaches 98.6%.",
	)
}

func TestPlanAdmissionBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--balancer", "pinned"}, "--balancer: needs --offered-load"},
		{[]string{"--reserve", "4"}, "--reserve: needs --offered-load"},
		{[]string{"--offered-load", "80"}, `--offered-load: must be a percentage such as 80% or a fraction such as 0.8, above 0 and at most 1000.0%, got "80"`},
		{[]string{"--offered-load", "0%"}, "--offered-load: must be a percentage"},
		{[]string{"--offered-load", "80%", "--balancer", "sticky"}, `--balancer: must be round-robin, random or pinned, got "sticky"`},
		{[]string{"--offered-load", "80%", "--skew", "1"}, "--skew: only with --balancer pinned"},
		{[]string{"--offered-load", "80%", "--balancer", "pinned", "--skew", "-1"}, "--skew: must be at least 0, got -1"},
		{[]string{"--offered-load", "80%", "--reserve", "17"}, `--reserve: must be a count of permits from 0 to the 16 usable, or a percentage such as 20%, got "17"`},
		{[]string{"--offered-load", "80%", "--reserve", "120%"}, "--reserve: must be a count of permits"},
		{[]string{"--offered-load", "80%", "--reserve-target", "1.5"}, "--reserve-target: must be a percentage"},
		{[]string{"--offered-load", "80%", "--latency-cv", "-0.5"}, "--latency-cv: must be at least 0"},
		{[]string{"--return-early"}, "--return-early: needs --offered-load"},
		{[]string{"--offered-load", "80%", "--ask-after", "-1ms"}, "--ask-after: must not be negative, got -1ms"},
		{[]string{"--offer"}, "--offer: needs --offered-load"},
		{[]string{"--offered-load", "80%", "--offer-keep", "1"}, "--offer-keep: only with --offer"},
		{[]string{"--offered-load", "80%", "--offer", "--offer-keep", "-1"}, "--offer-keep: must be at least 0, got -1"},
	} {
		_, stderr, code := runCLI(t, append(noRoom, c.args...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to say %q", c.args, code, stderr, c.want)
		}
	}
	_, stderr, code := runCLI(t, "plan", "-f", "testdata/quota.yaml", "--replicas-range", "2..4", "--offered-load", "80%")
	if code == 0 || !strings.Contains(stderr, "--offered-load: needs --replicas N") {
		t.Errorf("--replicas-range with --offered-load: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "plan", "--contract", "testdata/contract.yaml", "-f", "testdata/quota.yaml", "--replicas", "4", "--offered-load", "80%")
	if code == 0 || !strings.Contains(stderr, "--offered-load: not with --contract") {
		t.Errorf("--contract with --offered-load: exit %d, stderr %q", code, stderr)
	}
}
