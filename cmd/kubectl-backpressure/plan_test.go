package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// runCLI runs the command in-process and returns its output and exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

// runJSON runs the command with -o json and decodes its output.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v: decoding %s: %v", args, stdout, err)
	}
}

var approx = cmpopts.EquateApprox(1e-9, 0)

// containsSpaced reports whether out contains want, comparing runs of
// spaces as one, so that table assertions do not depend on column widths.
func containsSpaced(out, want string) bool {
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	return strings.Contains(squeeze(out), squeeze(want))
}

func TestPlanFromFileJSON(t *testing.T) {
	var got planJSON
	runJSON(t, &got, "plan", "-f", "testdata/quota.yaml", "--replicas", "8")
	// The search gateway of docs/concepts.md (testdata/quota.yaml), by
	// hand: A = 50 × 80% = 40 = 5 × 8, permits 5,
	// μ = 5 / 0.22 = 22.73/s, queue floor(22.73 × 0.1) = 2, acquire
	// min(200ms, 100ms), workers min(5, ceil(1900/8 × 0.22) = 53), retry
	// budget 10/8; demand 418 in flight, 3420 at worst, 40 available,
	// ceiling 40/0.22 = 181.82/s, shed 1 − 40/418.
	worst, worstShed := 3420.0, 1-40.0/3420
	want := planJSON{
		Replicas:             8,
		Usable:               40,
		Base:                 5,
		TotalPermits:         40,
		PreviousTotalPermits: 40,
		PerPod: perPodJSON{
			Permits:               5,
			QueueCapacity:         2,
			Workers:               5,
			CapacityPerSecond:     5 / 0.22,
			MaxQueueWaitSeconds:   0.1,
			AcquireTimeoutSeconds: 0.1,
			RetryBudgetPerSecond:  1.25,
		},
		Demand: &demandJSON{
			InFlight:          418,
			WorstInFlight:     &worst,
			Available:         40,
			GoodputCeiling:    40 / 0.22,
			ShedFraction:      1 - 40.0/418,
			WorstShedFraction: &worstShed,
		},
		Diagnostics: []diagnosticJSON{{
			Reason:  "DemandExceedsQuota",
			Message: "demand 1900/s × typical latency 220ms = 418 calls in flight against 40 available (5 permits × 8 replicas): goodput ceiling 40 / 220ms = 181.82/s, so 90.4% of the demand will be shed; at worst latency 1.8s it needs 3420 in flight and 98.8% is shed",
		}},
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("plan -o json mismatch (-want +got):\n%s", diff)
	}
}

// The JSON names are a contract with scripts: check them as text, not
// through the Go types that produce them.
func TestPlanJSONContract(t *testing.T) {
	stdout, stderr, code := runCLI(t, "plan", "-f", "testdata/quota.yaml", "--replicas", "8", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"perPod.permits", "perPod.queueCapacity", "perPod.workers", "perPod.ratePerSecond", "perPod.burst",
		"perPod.maxQueueWaitSeconds", "perPod.acquireTimeoutSeconds", "perPod.retryBudgetPerSecond",
		"demand.inFlight", "demand.goodputCeiling", "demand.shedFraction",
		"usable", "base", "extra", "totalPermits", "previousTotalPermits", "perPodExtra",
	} {
		if _, ok := lookup(doc, strings.Split(path, ".")); !ok {
			t.Errorf("plan JSON lacks %s", path)
		}
	}
	// Every pod holds base: perPodExtra is null, not absent.
	if v, ok := doc["perPodExtra"]; !ok || v != nil {
		t.Errorf("perPodExtra = %v (present %v), want null", v, ok)
	}
	diags, ok := doc["diagnostics"].([]any)
	if !ok || len(diags) == 0 {
		t.Fatalf("diagnostics = %v, want a non-empty list", doc["diagnostics"])
	}
	for _, d := range diags {
		m, _ := d.(map[string]any)
		if _, ok := m["reason"].(string); !ok {
			t.Errorf("diagnostic %v lacks reason", d)
		}
		if _, ok := m["message"].(string); !ok {
			t.Errorf("diagnostic %v lacks message", d)
		}
	}

	// Without demand, demand is null and diagnostics an empty list, so that
	// scripts can index both without checking for absence.
	stdout, _, _ = runCLI(t, "plan", "--concurrency", "50", "--latency", "220ms", "--deadline", "2s", "--replicas", "8", "-o", "json")
	if !strings.Contains(stdout, `"demand": null`) || !strings.Contains(stdout, `"diagnostics": []`) {
		t.Errorf("plan JSON without demand:\n%s", stdout)
	}
}

// plan uses the controller's code path: its figures are quota's.
func TestPlanMatchesQuotaplan(t *testing.T) {
	for _, tt := range []struct {
		file     string
		replicas int32
	}{{"testdata/quota.yaml", 8}, {"testdata/sample-quota.yaml", 8}, {"testdata/bundle.yaml", 8}, {"testdata/sample-quota.yaml", 100}} {
		q, err := loadQuota(tt.file, strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := quota.Size(q.Spec, tt.replicas)
		if err != nil {
			t.Fatal(err)
		}
		var got planJSON
		runJSON(t, &got, "plan", "-f", tt.file, "--replicas", strconv.Itoa(int(tt.replicas)))
		if diff := cmp.Diff(planJSONOf(plan), got); diff != "" {
			t.Errorf("%s at %d replicas: CLI differs from quota (-quota +cli):\n%s", tt.file, tt.replicas, diff)
		}
		if got.PerPod.Permits != int(plan.PerPod.Permits) || got.PerPod.QueueCapacity != int(plan.PerPod.QueueCapacity) {
			t.Errorf("%s: CLI permits/queue %d/%d, status %d/%d", tt.file, got.PerPod.Permits, got.PerPod.QueueCapacity, plan.PerPod.Permits, plan.PerPod.QueueCapacity)
		}
	}
}

func TestPlanFlagsOverrideFile(t *testing.T) {
	var got planJSON
	// 100 × 80% / 8 = 10 permits; a 1s deadline leaves 780ms, so 100ms fits.
	runJSON(t, &got, "plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--concurrency", "100", "--deadline", "1s", "--demand", "100")
	if got.PerPod.Permits != 10 || got.PerPod.MaxQueueWaitSeconds != 0.1 || got.Demand.InFlight != 22 {
		t.Errorf("overridden plan: permits %d, wait %vs, in flight %v; want 10, 0.1s, 22", got.PerPod.Permits, got.PerPod.MaxQueueWaitSeconds, got.Demand.InFlight)
	}
	// The sample leaves safetyPercent and belowOne to the defaults.
	runJSON(t, &got, "plan", "-f", "testdata/quota.yaml", "--replicas", "100", "--below-one", "AtLeastOne", "--safety-percent", "100")
	if got.PerPod.Permits != 1 || got.TotalPermits != 100 || got.Diagnostics[0].Reason != "Overcommitted" {
		t.Errorf("AtLeastOne at 100 replicas: %+v", got)
	}
}

func TestPlanFromMultiDocumentFile(t *testing.T) {
	var got planJSON
	runJSON(t, &got, "plan", "-f", "testdata/bundle.yaml", "--replicas", "8")
	// A = 120 × 90% = 108 = 13 × 8 + 4: four pods at 13, four at 14. The
	// usable rate 400 × 90% = 360/s and burst 36 go in proportion to the
	// permits: 360 × 13/108 = 43.33/s, floor(36 × 13/108) = 4; at 14,
	// 46.67/s and floor(36 × 14/108) = 4. Wait (500ms − 50ms) / 2 = 225ms;
	// queue floor(13 × 225 / 50) = 58, floor(14 × 225 / 50) = 63.
	wantBase := perPodJSON{
		Permits: 13, QueueCapacity: 58, Workers: 13, RatePerSecond: 360.0 * 13 / 108, Burst: 4,
		CapacityPerSecond: 260, MaxQueueWaitSeconds: 0.225, AcquireTimeoutSeconds: 0.225,
	}
	wantExtra := perPodJSON{
		Permits: 14, QueueCapacity: 63, Workers: 14, RatePerSecond: 360.0 * 14 / 108, Burst: 4,
		CapacityPerSecond: 280, MaxQueueWaitSeconds: 0.225, AcquireTimeoutSeconds: 0.225,
	}
	if diff := cmp.Diff(wantBase, got.PerPod, approx); diff != "" || len(got.Diagnostics) != 0 {
		t.Errorf("bundle plan at base (-want +got):\n%s\ndiagnostics %+v", diff, got.Diagnostics)
	}
	if got.PerPodExtra == nil {
		t.Fatal("bundle plan: perPodExtra is null, want the share at 14 permits")
	}
	if diff := cmp.Diff(wantExtra, *got.PerPodExtra, approx); diff != "" {
		t.Errorf("bundle plan at base+1 (-want +got):\n%s", diff)
	}
	if got.Usable != 108 || got.Base != 13 || got.Extra != 4 || got.TotalPermits != 108 || got.PreviousTotalPermits != 104 {
		t.Errorf("bundle division: usable %d, base %d, extra %d, in use %d, previous %d; want 108, 13, 4, 108, 104",
			got.Usable, got.Base, got.Extra, got.TotalPermits, got.PreviousTotalPermits)
	}
	// The pods' rates add up to the usable 360/s.
	if sum := 4*got.PerPod.RatePerSecond + 4*got.PerPodExtra.RatePerSecond; math.Abs(sum-360) > 1e-9 {
		t.Errorf("pods' rates add up to %v/s, want 360/s", sum)
	}
}

func TestPlanTable(t *testing.T) {
	stdout, stderr, code := runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas", "8")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"logistics-api → logistics.example.com: 50 in flight × 80% safety over 8 replicas (below one: Strict)",
		"usable 40 floor(concurrency × safety) = floor(50 × 80%)",
		"base 5 floor(usable / replicas) = floor(40 / 8)",
		"in use 40 5 permits × 8 replicas = 40, every usable permit",
		"permits          5        base",
		"capacity         22.73/s  permits / latency = 5 / 220ms",
		"queue capacity   0        floor(permits × max queue wait / latency) = floor(5 × 40ms / 220ms)",
		"workers          5        min(permits, ceil(demand / replicas × latency)) = min(5, ceil(1900/s / 8 × 220ms) = 53)",
		"retry budget     1.25/s   usable budget × permits / in use = 10/s × 5 / 40",
		"available 40 min(in use, concurrency) = min(40, 50)",
		"goodput ceiling   181.82/s  available / latency = 40 / 220ms",
		"shed              90.4%     max(0, 1 − available / in flight) = max(0, 1 − 40 / 418)",
		"WorstLatencyExceedsDeadline  worst latency 1.8s exceeds the deadline 300ms",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("plan table lacks %q:\n%s", want, stdout)
		}
	}

	// 40 over 21 pods: the arithmetic of the division, the shares side by
	// side, and what the previous division held.
	stdout, _, code = runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas", "21")
	if code != 0 {
		t.Fatal(stdout)
	}
	for _, want := range []string{
		"base 1 floor(usable / replicas) = floor(40 / 21)",
		"extra 19 usable mod replicas = 40 mod 21: the pods holding base + 1",
		"in use 40 2 permits × 19 replicas + 1 permit × 2 replicas = 40, every usable permit",
		"previous 21 base × replicas = 1 × 21, the division before every permit was handed out (52.5% of usable)",
		"PER POD BASE (2 PODS) BASE+1 (19 PODS) FORMULA",
		"permits 1 2 base, base + 1",
		"capacity 4.55/s 9.09/s permits / latency = 1 / 220ms, 2 / 220ms",
		"workers 1 2 min(permits, ceil(demand / replicas × latency)) = min(1, ceil(1900/s / 21 × 220ms) = 20), min(2, 20)",
		"retry budget 0.25/s 0.5/s usable budget × permits / in use = 10/s × 1 / 40, 10/s × 2 / 40",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("plan table at 21 replicas lacks %q:\n%s", want, stdout)
		}
	}

	// Below one under Strict: 40 pods hold one permit, 60 none.
	stdout, _, _ = runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas", "100")
	for _, want := range []string{
		"in use 40 1 permit × 40 replicas + 0 permits × 60 replicas = 40, every usable permit",
		"previous 0 base × replicas = 0 × 100, the division before every permit was handed out (0% of usable)",
		"PER POD BASE (60 PODS) BASE+1 (40 PODS) FORMULA",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("plan table at 100 replicas lacks %q:\n%s", want, stdout)
		}
	}
	// AtLeastOne over-commits, and says by how much.
	stdout, _, _ = runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas", "100", "--below-one", "AtLeastOne")
	for _, want := range []string{
		"base 1 floor(usable / replicas) = floor(40 / 100) = 0, raised to 1 by AtLeastOne",
		"in use 100 1 permit × 100 replicas = 100, 60 above usable: AtLeastOne over-commits",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("AtLeastOne plan table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestPlanSharedContract(t *testing.T) {
	args := []string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/callers.yaml", "--replicas", "8", "--caller-replicas", "reports/logistics-api=3"}
	var got contractJSON
	runJSON(t, &got, args...)
	// 40 usable permits: the report batch can use 10 and gets them; the
	// gateway, at weight 2 of 3 and no stated demand, the other 30. The
	// retry budget of 10/s goes with the permits: 2.5/s and 7.5/s.
	if got.Contract != "logistics" || got.Usable != 40 || len(got.Callers) != 2 {
		t.Fatalf("contract %q, usable %d, %d callers; want logistics, 40, 2", got.Contract, got.Usable, len(got.Callers))
	}
	ten := int64(10)
	wantCallers := []callerJSON{{
		Caller: "reports/logistics-api", Weight: 1, Demand: &ten, ReadyPods: 3, Permits: 10, RetryBudgetPerSecond: 2.5,
		Reason: "its demand of 10 in flight is met (weight 1 of 3)",
	}, {
		Caller: "shop/logistics-api", Weight: 2, ReadyPods: 8, Permits: 30, RetryBudgetPerSecond: 7.5,
		Reason: "weighted max-min fair share of 40 usable permits at weight 2 of 3: 30",
	}}
	for i, want := range wantCallers {
		c := got.Callers[i]
		// Each caller's plan divides its part exactly over its pods.
		if c.Plan.Usable != int64(c.Permits) || c.Plan.TotalPermits != int64(c.Permits) || c.Plan.Replicas != int(c.ReadyPods) {
			t.Errorf("%s: plan usable %d, in use %d over %d replicas; want its part %d over %d", c.Caller, c.Plan.Usable, c.Plan.TotalPermits, c.Plan.Replicas, c.Permits, c.ReadyPods)
		}
		c.Plan = planJSON{}
		if diff := cmp.Diff(want, c, approx); diff != "" {
			t.Errorf("caller %d (-want +got):\n%s", i, diff)
		}
	}
	// 10 over 3 pods: one at 4, two at 3; 30 over 8: six at 4, two at 3.
	if r, s := got.Callers[0].Plan, got.Callers[1].Plan; r.Base != 3 || r.Extra != 1 || s.Base != 3 || s.Extra != 6 {
		t.Errorf("divisions: reports base %d extra %d, shop base %d extra %d; want 3, 1, 3, 6", r.Base, r.Extra, s.Base, s.Extra)
	}

	stdout, stderr, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"logistics → logistics.example.com: 50 in flight × 80% safety = 40 permits to split over 2 callers by weighted max-min fairness, capped at each one's demand",
		"reports/logistics-api 1 10 3 10 none none 2.5/s its demand of 10 in flight is met (weight 1 of 3)",
		"shop/logistics-api 2 none given 8 30 none none 7.5/s weighted max-min fair share of 40 usable permits at weight 2 of 3: 30",
		"shop/logistics-api: its part of the shared contract, 30 permits, over 8 replicas (below one: Strict)",
		"in use 30 4 permits × 6 replicas + 3 permits × 2 replicas = 30, every usable permit",
		"in use 10 4 permits × 1 replica + 3 permits × 2 replicas = 10, every usable permit",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("shared contract output lacks %q:\n%s", want, stdout)
		}
	}

	// The same contract and quotas in one file; a caller without Ready pods
	// demands nothing and the other gets every permit.
	bundle := t.TempDir() + "/both.yaml"
	contract, _ := os.ReadFile("testdata/contract.yaml")
	callers, _ := os.ReadFile("testdata/callers.yaml")
	if err := os.WriteFile(bundle, append(append(contract, []byte("---\n")...), callers...), 0o600); err != nil {
		t.Fatal(err)
	}
	runJSON(t, &got, "plan", "--contract", bundle, "-f", bundle, "--replicas", "8", "--caller-replicas", "reports/logistics-api=0")
	if got.Callers[0].Permits != 0 || got.Callers[1].Permits != 40 || got.Callers[0].Reason != "no Ready pods: demands nothing, gets 0" {
		t.Errorf("caller without Ready pods: %+v", got.Callers)
	}
}

func TestPlanClusterShare(t *testing.T) {
	// This cluster uses 40% of the 50: 20 × 80% = 16 = 5 × 3 + 1. The rate
	// and burst scale the same way: 100 × 20/50 × 80% = 32/s, burst
	// floor(20 × 20/50 × 80%) = 6.
	args := []string{"plan", "-f", "testdata/sample-quota.yaml", "--replicas", "3", "--cluster-share", "40%", "--rate", "100", "--burst", "20"}
	var got planJSON
	runJSON(t, &got, args...)
	if got.Usable != 16 || got.Base != 5 || got.Extra != 1 || got.PerPod.RatePerSecond != 10 || got.PerPodExtra == nil || got.PerPodExtra.RatePerSecond != 12 {
		t.Errorf("cluster share 40%%: %+v", got)
	}
	stdout, _, _ := runCLI(t, args...)
	for _, want := range []string{
		"50 in flight, 20 of them for this cluster, × 80% safety over 3 replicas",
		"usable 16 floor(cluster share × safety) = floor(20 × 80%)",
		"usable rate 32/s rate × cluster share / concurrency × safety = 100/s × 20 / 50 × 80%",
		"usable burst 6 floor(burst × cluster share / concurrency × safety) = floor(20 × 20 / 50 × 80%)",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("cluster share plan lacks %q:\n%s", want, stdout)
		}
	}
	// A count works too, and gives the same plan as its percentage.
	var byCount planJSON
	runJSON(t, &byCount, "plan", "-f", "testdata/sample-quota.yaml", "--replicas", "3", "--cluster-share", "20", "--rate", "100", "--burst", "20")
	if diff := cmp.Diff(got, byCount); diff != "" {
		t.Errorf("--cluster-share 20 differs from 40%% of 50 (-percent +count):\n%s", diff)
	}
}

func TestPlanDemandInFlight(t *testing.T) {
	// 418 in flight at 220ms is 1900/s: the same plan as quota.yaml's rate.
	var byRate, byInFlight planJSON
	runJSON(t, &byRate, "plan", "-f", "testdata/quota.yaml", "--replicas", "8")
	runJSON(t, &byInFlight, "plan", "--concurrency", "50", "--latency", "220ms", "--worst-latency", "1.8s", "--deadline", "2s",
		"--max-queue-wait", "100ms", "--acquire-timeout", "200ms", "--retries", "1", "--retry-budget", "10", "--replicas", "8", "--demand-in-flight", "418")
	if diff := cmp.Diff(byRate, byInFlight); diff != "" {
		t.Errorf("--demand-in-flight 418 differs from 1900/s (-rate +inFlight):\n%s", diff)
	}
}

func TestSweep(t *testing.T) {
	var got sweepBootstrapJSON
	runJSON(t, &got, "plan", "-f", "testdata/sample-quota.yaml", "--replicas-range", "2..45")
	if len(got.Sweep) != 44 || got.Usable != 40 || got.LastWithPermit != 40 || got.FirstBelowOne == nil || *got.FirstBelowOne != 41 {
		t.Fatalf("sweep: %d rows, usable %d, last with permit %d, first below one %v; want 44, 40, 40, 41", len(got.Sweep), got.Usable, got.LastWithPermit, got.FirstBelowOne)
	}
	// 40 usable over at most 45 pods: below one permit each, so a pod that
	// starts without the operator admits nothing until the plan arrives.
	if want := (bootstrapJSON{Permits: 0, Usable: 40, MaxReplicas: 45}); got.Bootstrap != want {
		t.Errorf("bootstrap over 2..45 = %+v, want %+v", got.Bootstrap, want)
	}
	for _, row := range got.Sweep {
		// Every count uses all 40: base = floor(40 / N), 40 mod N pods
		// hold one more; the previous division held base × N.
		base, extra := 40/row.Replicas, 40%row.Replicas
		if row.Base != int64(base) || row.Extra != int64(extra) || row.PerPod.Permits != base || row.TotalPermits != 40 || row.PreviousTotalPermits != int64(base*row.Replicas) {
			t.Errorf("%d replicas: base %d, extra %d, per pod %d, in use %d, previous %d; want %d, %d, %d, 40, %d",
				row.Replicas, row.Base, row.Extra, row.PerPod.Permits, row.TotalPermits, row.PreviousTotalPermits, base, extra, base, base*row.Replicas)
		}
		if (extra > 0) != (row.PerPodExtra != nil) || (row.PerPodExtra != nil && row.PerPodExtra.Permits != base+1) {
			t.Errorf("%d replicas: perPodExtra %+v, want a share at %d permits exactly when %d > 0", row.Replicas, row.PerPodExtra, base+1, extra)
		}
	}

	stdout, _, code := runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas-range", "38..42")
	if code != 0 {
		t.Fatal(stdout)
	}
	for _, want := range []string{
		"logistics-api: 50 in flight × 80% safety = 40 permits to divide (below one: Strict)",
		"Every pod holds at least one permit up to 40 replicas; from 41 replicas on Strict gives 40 pods 1 permit and the others none.",
		"REPLICAS BASE +1 PODS IN USE PREVIOUS QUEUE MAX WAIT WORKERS RATE BURST RETRY BUDGET DIAGNOSTICS",
		"39 1 1 40 (100%) 39 (97.5%) 0 40ms 1|2 none none 0.25/s|0.5/s WorstLatencyExceedsDeadline, DemandExceedsQuota",
		"41 0 40 40 (100%) 0 (0%) 0 40ms 0|1 none none 0/s|0.25/s QuotaTooSmall, WorstLatencyExceedsDeadline, DemandExceedsQuota",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("sweep table lacks %q:\n%s", want, stdout)
		}
	}

	if want := "Bootstrap share: 0 permits per pod = floor(40 usable / 42, the most replicas): below one permit, a pod on runtime's bootstrap plan admits no call"; !strings.Contains(stdout, want) {
		t.Errorf("sweep 38..42 lacks %q:\n%s", want, stdout)
	}

	got = sweepBootstrapJSON{}
	runJSON(t, &got, "plan", "-f", "testdata/sample-quota.yaml", "--replicas-range", "1..4")
	if got.FirstBelowOne != nil {
		t.Errorf("sweep 1..4: firstBelowOne = %d, want null", *got.FirstBelowOne)
	}
	// floor(40 / 4) = 10: four pods on it hold 40, the whole usable.
	if want := (bootstrapJSON{Permits: 10, Usable: 40, MaxReplicas: 4}); got.Bootstrap != want {
		t.Errorf("bootstrap over 1..4 = %+v, want %+v", got.Bootstrap, want)
	}
}

func TestSweepCompare(t *testing.T) {
	stdout, stderr, code := runCLI(t, "plan", "-f", "testdata/sample-quota.yaml", "--replicas-range", "1..60", "--compare")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"REPLICAS BASE +1 PODS IN USE PREVIOUS GAINED",
		"7 5 5 40 (100%) 35 (87.5%) 5",
		"14 2 12 40 (100%) 28 (70%) 12",
		"16 2 8 40 (100%) 32 (80%) 8",
		"21 1 19 40 (100%) 21 (52.5%) 19",
		"41 0 40 40 (100%) 0 (0%) 40",
	} {
		if !containsSpaced(stdout, want) {
			t.Errorf("comparison lacks %q:\n%s", want, stdout)
		}
	}
	// The summary is the mean over the range: Σ min(40, floor(40/N)·N) over
	// 1..60 against 60 × 40.
	var prev int
	for n := 1; n <= 60; n++ {
		prev += 40 / n * n
	}
	want := "Over 1..60 replicas the pods hold 100% of the usable permits; under the previous division, " + shortPercent(int64(prev), 2400) + "."
	if !strings.Contains(stdout, want) {
		t.Errorf("comparison lacks %q:\n%s", want, stdout)
	}
}

// Bad input: exit 1, nothing on stdout, one line on stderr naming the flag
// or the field.
func TestBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--replicas", "8"}, "error: --concurrency: required when no -f FILE gives it"},
		{[]string{"plan", "-f", "testdata/quota.yaml"}, "error: --replicas: required, or --replicas-range MIN..MAX for a sweep (a quota does not say how many replicas call it)"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--replicas-range", "2..4"}, "error: --replicas, --replicas-range: give one, not both"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "0"}, "error: --replicas: must be at least 1, got 0"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "-3"}, "error: --replicas: must be at least 1, got -3"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "eight"}, `error: invalid argument "eight" for "--replicas" flag: strconv.ParseInt: parsing "eight": invalid syntax`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas-range", "2-20"}, `error: --replicas-range: must be MIN..MAX such as 2..20, got "2-20"`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas-range", "20..2"}, "error: --replicas-range: MAX must be at least MIN 20, got 2"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas-range", "1..20000"}, "error: --replicas-range: must be within 9999 of MinReplicas 1, got 20000 (20000 divisors)"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--concurrency", "0"}, "error: --concurrency: must be at least 1, got 0"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--latency", "soon"}, `error: invalid argument "soon" for "--latency" flag: time: invalid duration "soon"`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--deadline", "-2s"}, "error: --deadline: must be greater than 0, got -2s"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--worst-latency", "100ms"}, "error: --worst-latency: must not be below the typical latency 220ms, got 100ms"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--max-queue-wait", "3s"}, "error: --max-queue-wait: must be less than deadline 2s, got 3s"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--demand", "0"}, "error: --demand: must be at least 1, got 0"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--safety-percent", "0"}, "error: --safety-percent: must be between 1 and 100, got 0"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--burst", "5"}, "error: --burst: requires a rate greater than 0, got 5 with no rate"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--retries", "11"}, "error: --retries: must be at most 10, got 11"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--below-one", "Lenient"}, `error: --below-one: must be Strict or AtLeastOne, got "Lenient"`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "-o", "yaml"}, `error: --output: must be table or json, got "yaml"`},
		{[]string{"plan", "-f", "testdata/missing.yaml", "--replicas", "8"}, "error: open testdata/missing.yaml: no such file or directory"},
		{[]string{"plan", "-f", "testdata/deployment.yaml", "--replicas", "8"}, `error: testdata/deployment.yaml: kind: must be DownstreamQuota, got "Deployment"`},
		{[]string{"plan", "-f", "testdata/wrong-version.yaml", "--replicas", "8"}, `error: testdata/wrong-version.yaml: apiVersion: must be backpressure.dev/v1alpha1, got "backpressure.dev/v1beta1"`},
		{[]string{"plan", "-f", "testdata/unknown-field.yaml", "--replicas", "8"}, `error: testdata/unknown-field.yaml: unknown field "spec.contract.concurency"`},
		{[]string{"plan", "-f", "testdata/bad-duration.yaml", "--replicas", "8"}, `error: testdata/bad-duration.yaml: spec.latency.worst: must be a duration such as 220ms, got "soon"`},
		{[]string{"plan", "-f", "testdata/invalid-spec.yaml", "--replicas", "8"}, "error: testdata/invalid-spec.yaml: spec.maxQueueWait: must be less than deadline 300ms, got 400ms"},
		{[]string{"plan", "-f", "testdata/duplicate-key.yaml", "--replicas", "8"}, `error: testdata/duplicate-key.yaml: yaml: unmarshal errors: line 7: key "contract" already set in map`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "extra"}, `error: argument "extra": must be dq/NAME, a DownstreamQuota of the namespace (-n)`},
		{[]string{"plan", "dq/logistics-api", "-f", "testdata/quota.yaml"}, "error: --filename: not with dq/logistics-api, which reads the quota from the cluster"},
		{[]string{"plan", "dq/logistics-api", "--replicas", "8", "--compare"}, "error: --compare: needs --replicas-range MIN..MAX"},
		{[]string{"plan", "-f", "-", "--replicas", "8"}, "error: -: the standard input is empty; pipe a manifest into -f -"},
		{[]string{"plan", "--contract", "-", "-f", "-", "--replicas", "8"}, "error: --contract: - reads the standard input, which -f - already reads; give one of them a file"},
		{[]string{"status", "logistics-api", "-A"}, "error: --all-namespaces: a quota cannot be named across all namespaces; give -n NAMESPACE"},
		{[]string{"status", "-o", "wide"}, "error: --output: unable to match a printer suitable for the output format \"wide\", allowed formats are: go-template,go-template-file,json,jsonpath,jsonpath-as-json,jsonpath-file,kyaml,name,template,templatefile,yaml"},
		{[]string{"plan", "--frobnicate"}, "error: unknown flag: --frobnicate"},
		{[]string{"evaluate", "--workers", "0", "--queue", "1", "--latency", "1s", "--deadline", "2s"}, "error: --workers: must be at least 1, got 0"},
		{[]string{"evaluate", "--workers", "4", "--queue", "-1", "--latency", "1s", "--deadline", "2s"}, "error: --queue: must be at least 0, got -1"},
		{[]string{"evaluate", "--workers", "4", "--queue", "1", "--latency", "0s", "--deadline", "2s"}, "error: --latency: must be greater than 0, got 0s"},
		{[]string{"evaluate", "--workers", "4"}, `error: required flag(s) "deadline", "latency", "queue" not set`},
		{[]string{"retry", "--capacity", "0", "--arrival", "10", "--retries", "1"}, "error: --capacity: must be greater than 0, got 0"},
		{[]string{"retry", "--capacity", "10", "--arrival", "-1", "--retries", "1"}, "error: --arrival: must not be negative, got -1"},
		{[]string{"retry", "--capacity", "10", "--arrival", "NaN", "--retries", "1"}, "error: --arrival: must be a finite number, got NaN"},
		{[]string{"retry", "--capacity", "10", "--arrival", "10", "--retries", "-1"}, "error: --retries: must be at least 0, got -1"},
		{[]string{"backlog", "--arrival", "10", "--workers", "1", "--latency", "1s", "--queue", "0"}, "error: --queue: must be at least 1, got 0"},
		{[]string{"backlog", "--arrival", "10", "--workers", "1", "--latency", "1s", "--buffer", "0s"}, "error: --buffer: must be greater than 0, got 0s"},
		{[]string{"backlog", "--arrival", "10", "--workers", "1", "--latency", "1s", "--target-rate", "0"}, "error: --target-rate: must be greater than 0, got 0"},
		{[]string{"backlog", "--arrival", "0", "--workers", "1", "--latency", "1s"}, "error: --arrival: must be greater than 0, got 0"},
		{[]string{"plna"}, `error: unknown command "plna" for "kubectl backpressure" Did you mean this? plan`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--compare"}, "error: --compare: needs --replicas-range MIN..MAX"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--caller-replicas", "shop/x=2"}, "error: --caller-replicas: needs --contract FILE"},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "--replicas", "8"}, "error: --filename: required with --contract: the quotas that share the contract"},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/callers.yaml"}, "error: --replicas: required with --contract, or --caller-replicas reports/logistics-api=COUNT for each caller"},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/callers.yaml", "--replicas", "8", "--concurrency", "60"}, "error: --concurrency: not with --contract: the contract comes from its file and each caller's settings from its quota"},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/callers.yaml", "--replicas", "8", "--caller-replicas", "shop/gateway=2"}, `error: --caller-replicas: shop/gateway is not a quota of testdata/callers.yaml sharing "logistics"`},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/callers.yaml", "--replicas", "8", "--caller-replicas", "shop/logistics-api=-1"}, "error: --caller-replicas: shop/logistics-api must be at least 0, got -1"},
		{[]string{"plan", "--contract", "testdata/contract.yaml", "-f", "testdata/quota.yaml", "--replicas", "8"}, `error: testdata/quota.yaml: shop/logistics-api: spec.contractRef: must name the DownstreamContract "logistics" of --contract, got none`},
		{[]string{"plan", "--contract", "testdata/contract-invalid.yaml", "-f", "testdata/callers.yaml", "--replicas", "8"}, "error: testdata/contract-invalid.yaml: downstreamContract.spec.contract.burst: requires a rate greater than 0, got 5 with no rate"},
		{[]string{"plan", "--contract", "testdata/quota.yaml", "-f", "testdata/callers.yaml", "--replicas", "8"}, "error: testdata/quota.yaml: kind: none of its 1 documents is a DownstreamContract of backpressure.dev/v1alpha1"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--cluster-share", "half"}, `error: --cluster-share: must be calls in flight such as 20 or a percentage such as 40%, got "half"`},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--cluster-share", "51"}, "error: --cluster-share: must be between 1 and the contract's concurrency 50, got 51"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--cluster-share", "0%"}, "error: --cluster-share: must be between 1 and 100, got 0"},
		{[]string{"plan", "-f", "testdata/quota.yaml", "--replicas", "8", "--demand-in-flight", "0"}, "error: --demand-in-flight: must be at least 1, got 0"},
		{[]string{"plan", "-f", "testdata/shared-quota.yaml", "--replicas", "8"}, `error: testdata/shared-quota.yaml: spec.contractRef: the quota's part of the shared DownstreamContract "logistics" depends on the other callers; plan needs a quota with its own spec.contract`},
		{[]string{"plan", "-f", "testdata/two-contracts.yaml", "--replicas", "8"}, `error: testdata/two-contracts.yaml: spec.contractRef: must not be given with spec.contract: exactly one of them, got contractRef "logistics"`},
	}
	for _, tt := range tests {
		stdout, stderr, code := runCLI(t, tt.args...)
		if code != 1 || stdout != "" || stderr != tt.want+"\n" {
			t.Errorf("%v:\n exit %d, stdout %q\n stderr %q\n  want %q", tt.args, code, stdout, stderr, tt.want+"\n")
		}
	}
}

func TestBadInputNamesFileFieldWhenNoFlagGaveIt(t *testing.T) {
	// The file gives a concurrency of 0; no flag overrides it, so the
	// error names the file's field, not a flag.
	f := t.TempDir() + "/zero.yaml"
	data, err := os.ReadFile("testdata/quota.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(string(data), "concurrency: 50", "concurrency: 0", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "plan", "-f", f, "--replicas", "8")
	if want := "error: " + f + ": spec.contract.concurrency: must be at least 1, got 0\n"; code != 1 || stderr != want {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr, want)
	}
}

func TestShedFractionIsAFraction(t *testing.T) {
	var got planJSON
	// 50 × 1% = 0 permits: nothing is available, everything is shed.
	runJSON(t, &got, "plan", "-f", "testdata/quota.yaml", "--replicas", "100", "--safety-percent", "1")
	if got.Demand == nil || got.Demand.ShedFraction != 1 || math.IsNaN(got.Demand.GoodputCeiling) {
		t.Errorf("no usable permit at 100 replicas: demand %+v, want everything shed", got.Demand)
	}
}
