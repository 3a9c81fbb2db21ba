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
	z := a.SmallestReserve
	if !z.Found || z.Target != 0.99 || z.RatioToGlobalGate < 0.99 || z.Reserve < 5 || z.Reserve > 16 {
		t.Errorf("smallest reserve %+v: want one above the 4 that reach 89%%, reaching 99%%", z)
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

func TestPlanAdmissionTable(t *testing.T) {
	out, stderr, code := runCLI(t, append(noRoom, "--offered-load", "80%", "--reserve", "4")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"Admission at 80.0% of usable / latency (128/s), random balancer, lognormal latency cv 0.5; a simulation of 200000 calls, seed 1:",
		"SHARES RESERVE ADMITTED OF ONE GATE BORROWED PERMITS PER POD",
		"one gate of 16 - 92.0% 100% - 16",
		"equal 0 77.2% 83.9% - 4",
		"demand-following 4 ",
		"Smallest reserve for 99.0% of one gate with demand-following shares:",
	} {
		if !containsSpaced(out, want) {
			t.Errorf("plan's table lacks %q:\n%s", want, out)
		}
	}
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
