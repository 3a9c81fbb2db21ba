package sizing

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// The checks in this file are the package's guarantees. The random tests
// and the fuzz targets run them on every result.

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

var knownReasons = map[string]bool{
	ReasonQuotaTooSmall:                    true,
	ReasonOvercommitted:                    true,
	ReasonDeadlineBelowLatency:             true,
	ReasonDemandExceedsQuota:               true,
	ReasonDemandExceedsQuotaAtWorstLatency: true,
	ReasonWorstLatencyExceedsDeadline:      true,
	ReasonQueueWaitClamped:                 true,
	ReasonRateAllowsExcessInFlight:         true,
	ReasonBurstRaisedToOne:                 true,
	ReasonRetriesWithoutBudget:             true,
}

var inputNames = map[string]bool{
	"Concurrency": true, "RatePerSecond": true, "Burst": true, "SafetyPercent": true,
	"Divisor": true, "Latency": true, "WorstLatency": true, "Deadline": true,
	"MaxQueueWait": true, "AcquireTimeout": true, "DemandPerSecond": true,
	"MaxRetries": true, "RetryBudgetPerSecond": true, "BelowOne": true,
	"ClusterConcurrency": true, "Part.Permits": true, "Part.RatePerSecond": true,
	"Part.Burst": true, "Part.RetryBudgetPerSecond": true,
}

func hasReason(diags []Diagnostic, reason string) (Diagnostic, bool) {
	for _, d := range diags {
		if d.Reason == reason {
			return d, true
		}
	}
	return Diagnostic{}, false
}

func checkFloat(t *testing.T, name string, f float64) {
	t.Helper()
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		t.Errorf("%s = %v, want a finite number ≥ 0", name, f)
	}
}

func checkCount(t *testing.T, name string, n int) {
	t.Helper()
	if n < 0 || n > MaxCount {
		t.Errorf("%s = %d, want 0..%d", name, n, MaxCount)
	}
}

// checkSizeOrError checks the outcome of Size(in), valid or not.
func checkSizeOrError(t *testing.T, in Input, got Result, err error) {
	t.Helper()
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) || !inputNames[ie.Input] {
			t.Fatalf("Size(%+v) error = %v, want an *InputError naming an input", in, err)
		}
		if diff := cmp.Diff(Result{}, got); diff != "" {
			t.Fatalf("Size(%+v) returned a result with its error (-want +got):\n%s", in, diff)
		}
		if in.Validate() == nil {
			t.Fatalf("Size(%+v) failed with %v but Validate accepts the input", in, err)
		}
		return
	}
	checkSize(t, in, got)
}

// usableWant returns A and the usable rate, burst and retry budget that in
// asks for, computed independently of Size with exact rationals.
func usableWant(in Input) (a int64, rate *big.Rat, burst int64, budget *big.Rat) {
	if pt := in.Part; pt != nil {
		return int64(pt.Permits), ratOf(pt.RatePerSecond), int64(pt.Burst), ratOf(pt.RetryBudgetPerSecond)
	}
	c, cc, pct := int64(in.Concurrency), int64(in.Concurrency), int64(in.SafetyPercent)
	if in.ClusterConcurrency > 0 {
		cc = int64(in.ClusterConcurrency)
	}
	a = cc * pct / 100
	rate = new(big.Rat)
	if in.RatePerSecond > 0 {
		rate.Mul(ratOf(in.RatePerSecond), big.NewRat(cc*pct, 100*c))
		b := new(big.Int).Mul(big.NewInt(int64(in.Burst)), big.NewInt(cc*pct))
		burst = b.Quo(b, big.NewInt(100*c)).Int64()
	}
	return a, rate, burst, ratOf(in.RetryBudgetPerSecond)
}

func ratOf(f float64) *big.Rat { return new(big.Rat).SetFloat64(f) }

// group is a number of pods holding the same permits.
type group struct{ pods, permits int64 }

// groups returns the pods of the division: N − Extra at Base, Extra at
// Base+1 (empty groups left out).
func groups(got Result, n int64) []group {
	var gs []group
	if n-got.Extra > 0 {
		gs = append(gs, group{n - got.Extra, got.Base})
	}
	if got.Extra > 0 {
		gs = append(gs, group{got.Extra, got.Base + 1})
	}
	return gs
}

// closeTo reports whether sum is total up to the rounding of one float64
// per pod: each share is rounded once to the nearest float64, so it is off
// by at most half an ulp of itself (2^-53 relative), or by 2^-1075 when it
// is subnormal.
func closeTo(sum, total *big.Rat, pods int64) bool {
	diff := new(big.Rat).Sub(sum, total)
	diff.Abs(diff)
	slack := new(big.Rat).Mul(total, big.NewRat(1, 1<<52))
	tiny := new(big.Rat).SetFrac(big.NewInt(pods), new(big.Int).Lsh(big.NewInt(1), 1074))
	slack.Add(slack, tiny)
	return diff.Cmp(slack) <= 0
}

// checkSize asserts the guarantees of the package doc on one valid plan.
func checkSize(t *testing.T, in Input, got Result) {
	t.Helper()
	pp := got.PerPod
	c, n, pct := int64(in.Concurrency), int64(in.Divisor), int64(in.SafetyPercent)

	// The exact division: Base·N + Extra = A ≤ C'·s ≤ C, unless AtLeastOne
	// raised every pod to one permit and said so.
	a, wantRate, wantBurst, wantBudget := usableWant(in)
	if got.Usable != a {
		t.Fatalf("Usable = %d, want %d", got.Usable, a)
	}
	if in.Part == nil {
		cc := c
		if in.ClusterConcurrency > 0 {
			cc = int64(in.ClusterConcurrency)
		}
		if 100*a > cc*pct || cc > c {
			t.Errorf("A = %d above C'·s = %d·%d%% or C' above C = %d", a, cc, pct, c)
		}
	}
	_, tooSmall := hasReason(got.Diagnostics, ReasonQuotaTooSmall)
	over, overcommitted := hasReason(got.Diagnostics, ReasonOvercommitted)
	switch {
	case a >= n || in.BelowOne == Strict:
		if got.Base != a/n || got.Extra != a%n || got.TotalPermits != a || got.Base*n+got.Extra != a {
			t.Errorf("Base %d, Extra %d, TotalPermits %d; want %d·%d + %d = A = %d", got.Base, got.Extra, got.TotalPermits, a/n, n, a%n, a)
		}
		if overcommitted || tooSmall != (a < n) {
			t.Errorf("A = %d over %d pods: QuotaTooSmall %v, Overcommitted %v; want %v, false", a, n, tooSmall, overcommitted, a < n)
		}
	default:
		if got.Base != 1 || got.Extra != 0 || got.TotalPermits != n || !overcommitted || tooSmall {
			t.Errorf("AtLeastOne below one: Base %d, Extra %d, TotalPermits %d, Overcommitted %v, QuotaTooSmall %v; want 1, 0, %d, true, false",
				got.Base, got.Extra, got.TotalPermits, overcommitted, tooSmall, n)
		}
		if want := fmt.Sprintf("hold up to %d in flight", n); !strings.Contains(over.Message, want) {
			t.Errorf("Overcommitted message %q does not state the real total %q", over.Message, want)
		}
	}
	if want := float64(a) / float64(n); got.Share != want {
		t.Errorf("Share = %v, want %d/%d", got.Share, a, n)
	}
	if got.TotalPermits > c && !overcommitted {
		t.Errorf("pods hold %d in flight over a contract of %d without an Overcommitted diagnostic", got.TotalPermits, c)
	}

	// PerPod and PerPodExtra are the shares at Base and Base+1.
	if int64(pp.Permits) != got.Base {
		t.Errorf("PerPod.Permits = %d, want Base %d", pp.Permits, got.Base)
	}
	if diff := cmp.Diff(got.ShareFor(int(got.Base)), pp); diff != "" {
		t.Errorf("PerPod is not ShareFor(Base) (-ShareFor +PerPod):\n%s", diff)
	}
	switch {
	case (got.Extra > 0) != (got.PerPodExtra != nil):
		t.Errorf("Extra = %d with PerPodExtra %+v; want a share at Base+1 exactly when Extra > 0", got.Extra, got.PerPodExtra)
	case got.PerPodExtra != nil:
		if diff := cmp.Diff(got.ShareFor(int(got.Base+1)), *got.PerPodExtra); diff != "" {
			t.Errorf("PerPodExtra is not ShareFor(Base+1) (-ShareFor +PerPodExtra):\n%s", diff)
		}
	}

	// The usable totals.
	if ratOf(got.UsableRatePerSecond).Cmp(wantRate) != 0 && !closeTo(ratOf(got.UsableRatePerSecond), wantRate, 1) {
		t.Errorf("UsableRatePerSecond = %v, want %s", got.UsableRatePerSecond, wantRate.FloatString(6))
	}
	if got.UsableBurst != wantBurst {
		t.Errorf("UsableBurst = %d, want %d", got.UsableBurst, wantBurst)
	}
	if ratOf(got.UsableRetryBudgetPerSecond).Cmp(wantBudget) != 0 {
		t.Errorf("UsableRetryBudgetPerSecond = %v, want %s", got.UsableRetryBudgetPerSecond, wantBudget.FloatString(6))
	}

	// Summed over the pods, the shares hand out the usable totals: the
	// permits exactly, the rate and retry budget up to one rounding per pod,
	// the burst never more unless BurstRaisedToOne said so.
	rateSum, budgetSum := new(big.Rat), new(big.Rat)
	var permitSum, burstSum int64
	for _, g := range groups(got, n) {
		s := got.ShareFor(int(g.permits))
		checkShare(t, in, got, s)
		for _, r := range []int{0, 1, int(min(got.Usable, MaxCount)), math.MaxInt} {
			checkReserveShare(t, got, s, got.ShareWithReserve(int(g.permits), r), r)
		}
		permitSum += g.pods * int64(s.Permits)
		burstSum += g.pods * int64(s.Burst)
		rateSum.Add(rateSum, new(big.Rat).Mul(ratOf(s.RatePerSecond), big.NewRat(g.pods, 1)))
		budgetSum.Add(budgetSum, new(big.Rat).Mul(ratOf(s.RetryBudgetPerSecond), big.NewRat(g.pods, 1)))
	}
	if permitSum != got.TotalPermits {
		t.Errorf("Σ permits over %d pods = %d, want TotalPermits %d", n, permitSum, got.TotalPermits)
	}
	usableRate, usableBudget := ratOf(got.UsableRatePerSecond), ratOf(got.UsableRetryBudgetPerSecond)
	if got.TotalPermits == 0 {
		usableRate, usableBudget = new(big.Rat), new(big.Rat)
	}
	if !closeTo(rateSum, usableRate, n) {
		t.Errorf("Σ rate over %d pods = %s, want the usable rate %v", n, rateSum.FloatString(12), got.UsableRatePerSecond)
	}
	if !closeTo(budgetSum, usableBudget, n) {
		t.Errorf("Σ retry budget over %d pods = %s, want the usable %v", n, budgetSum.FloatString(12), got.UsableRetryBudgetPerSecond)
	}
	raised, burstRaised := hasReason(got.Diagnostics, ReasonBurstRaisedToOne)
	if burstSum > got.UsableBurst && !burstRaised {
		t.Errorf("Σ burst over %d pods = %d above the usable burst %d without BurstRaisedToOne", n, burstSum, got.UsableBurst)
	}
	if burstRaised {
		if want := fmt.Sprintf("may burst %d against a usable burst of %d", burstSum, got.UsableBurst); !strings.Contains(raised.Message, want) {
			t.Errorf("BurstRaisedToOne message %q does not state %q", raised.Message, want)
		}
	}

	// Every figure is finite and not negative; every count in range.
	for name, f := range map[string]float64{
		"Share": got.Share, "UsableRatePerSecond": got.UsableRatePerSecond, "UsableRetryBudgetPerSecond": got.UsableRetryBudgetPerSecond,
	} {
		checkFloat(t, name, f)
	}
	checkCount(t, "DemandWorkers", got.DemandWorkers)
	if pp.MaxQueueWait < 0 || pp.AcquireTimeout < 0 {
		t.Errorf("MaxQueueWait = %s, AcquireTimeout = %s, want both ≥ 0", pp.MaxQueueWait, pp.AcquireTimeout)
	}

	// Queue, deadline and acquire timeout.
	if in.Deadline > in.Latency {
		if pp.MaxQueueWait > in.Deadline-in.Latency {
			t.Errorf("MaxQueueWait %s + Latency %s exceed Deadline %s", pp.MaxQueueWait, in.Latency, in.Deadline)
		}
	} else {
		if pp.MaxQueueWait != 0 || pp.QueueCapacity != 0 {
			t.Errorf("deadline %s ≤ latency %s: MaxQueueWait = %s, QueueCapacity = %d, want 0", in.Deadline, in.Latency, pp.MaxQueueWait, pp.QueueCapacity)
		}
		if _, ok := hasReason(got.Diagnostics, ReasonDeadlineBelowLatency); !ok {
			t.Errorf("deadline %s ≤ latency %s without a DeadlineBelowLatency diagnostic", in.Deadline, in.Latency)
		}
	}
	if in.MaxQueueWait != nil && pp.MaxQueueWait > *in.MaxQueueWait {
		t.Errorf("MaxQueueWait = %s, above the %s given", pp.MaxQueueWait, *in.MaxQueueWait)
	}
	if pp.AcquireTimeout > pp.MaxQueueWait {
		t.Errorf("AcquireTimeout %s > MaxQueueWait %s", pp.AcquireTimeout, pp.MaxQueueWait)
	}
	if in.AcquireTimeout != nil && pp.AcquireTimeout > *in.AcquireTimeout {
		t.Errorf("AcquireTimeout = %s, above the %s given", pp.AcquireTimeout, *in.AcquireTimeout)
	}
	if in.WorstLatency > 0 && in.Deadline > in.Latency && in.WorstLatency > in.Deadline-pp.MaxQueueWait {
		if _, ok := hasReason(got.Diagnostics, ReasonWorstLatencyExceedsDeadline); !ok {
			t.Errorf("queue wait %s + worst latency %s exceed deadline %s without a diagnostic", pp.MaxQueueWait, in.WorstLatency, in.Deadline)
		}
	}

	// Demand.
	if (in.DemandPerSecond > 0) != (got.Demand != nil) {
		t.Errorf("demand %v gave Demand %+v; want figures exactly when demand is known", in.DemandPerSecond, got.Demand)
	}
	if d := got.Demand; d != nil {
		for name, f := range map[string]float64{
			"InFlight": d.InFlight, "WorstInFlight": d.WorstInFlight, "GoodputCeilingPerSecond": d.GoodputCeilingPerSecond,
			"ShedFraction": d.ShedFraction, "WorstShedFraction": d.WorstShedFraction,
		} {
			checkFloat(t, name, f)
		}
		if d.ShedFraction > 1 || d.WorstShedFraction > 1 {
			t.Errorf("shed fractions %v, %v above 1", d.ShedFraction, d.WorstShedFraction)
		}
		if int64(d.Available) > c || int64(d.Available) > got.TotalPermits {
			t.Errorf("Available = %d, above min(%d, %d)", d.Available, got.TotalPermits, c)
		}
		if _, ok := hasReason(got.Diagnostics, ReasonDemandExceedsQuota); ok != (d.ShedFraction > 0) {
			t.Errorf("ShedFraction %v but DemandExceedsQuota reported = %v", d.ShedFraction, ok)
		}
	}

	if _, ok := hasReason(got.Diagnostics, ReasonRetriesWithoutBudget); ok != (in.MaxRetries > 0 && got.UsableRetryBudgetPerSecond == 0) {
		t.Errorf("RetriesWithoutBudget reported %v with %d retries and a usable budget of %v", ok, in.MaxRetries, got.UsableRetryBudgetPerSecond)
	}
	for _, d := range got.Diagnostics {
		if !knownReasons[d.Reason] || d.Message == "" || strings.Contains(d.Message, "%!") ||
			strings.Contains(d.Message, "NaN") || strings.Contains(d.Message, "Inf") {
			t.Errorf("diagnostic %+v: want a known reason and a formatted message", d)
		}
	}

	// Deterministic.
	again, err := Size(in)
	if err != nil {
		t.Fatalf("second Size() error = %v", err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("Size() is not deterministic (-first +second):\n%s", diff)
	}
}

// checkReserveShare asserts that withReserve, ShareWithReserve(p, r), is
// own, ShareFor(p), with the waiting room sized for p + r permits when p
// and r are positive, up to plan.MaxQueueCapacity.
func checkReserveShare(t *testing.T, got Result, own, withReserve PerPod, r int) {
	t.Helper()
	want := own
	if own.Permits > 0 && r > 0 {
		n := new(big.Int).Add(big.NewInt(int64(own.Permits)), big.NewInt(int64(r)))
		q := n.Mul(n, big.NewInt(int64(own.MaxQueueWait)))
		q.Quo(q, big.NewInt(int64(got.Latency)))
		if q.Cmp(big.NewInt(plan.MaxQueueCapacity)) > 0 {
			q.SetInt64(plan.MaxQueueCapacity)
		}
		want.QueueCapacity = int(q.Int64())
	}
	if diff := cmp.Diff(want, withReserve); diff != "" {
		t.Errorf("ShareWithReserve(%d, %d) (-want +got):\n%s", own.Permits, r, diff)
	}
	if withReserve.QueueCapacity < own.QueueCapacity {
		t.Errorf("ShareWithReserve(%d, %d): waiting room %d below the own permits' %d", own.Permits, r, withReserve.QueueCapacity, own.QueueCapacity)
	}
}

// checkShare asserts the guarantees of one pod's share s (ShareFor):
// figures in range, the waiting room and workers sized for its own permits,
// a rate and burst exactly when the result has a rate and s has permits.
func checkShare(t *testing.T, in Input, got Result, s PerPod) {
	t.Helper()
	for name, f := range map[string]float64{
		"RatePerSecond": s.RatePerSecond, "CapacityPerSecond": s.CapacityPerSecond, "RetryBudgetPerSecond": s.RetryBudgetPerSecond,
	} {
		checkFloat(t, name, f)
	}
	for name, v := range map[string]int{
		"Permits": s.Permits, "Burst": s.Burst, "QueueCapacity": s.QueueCapacity, "Workers": s.Workers,
	} {
		checkCount(t, name, v)
	}
	wantQueue := new(big.Int).Mul(big.NewInt(int64(s.Permits)), big.NewInt(int64(s.MaxQueueWait)))
	wantQueue.Quo(wantQueue, big.NewInt(int64(in.Latency)))
	if wantQueue.Cmp(big.NewInt(plan.MaxQueueCapacity)) > 0 {
		wantQueue.SetInt64(plan.MaxQueueCapacity)
	}
	if int64(s.QueueCapacity) != wantQueue.Int64() {
		t.Errorf("QueueCapacity = %d, want floor(%d × %s / %s) = %s", s.QueueCapacity, s.Permits, s.MaxQueueWait, in.Latency, wantQueue)
	}
	if s.Workers > s.Permits {
		t.Errorf("Workers %d > Permits %d", s.Workers, s.Permits)
	}
	if s.Permits > 0 && s.Workers < 1 {
		t.Errorf("Workers = %d with %d permits, want at least 1", s.Workers, s.Permits)
	}
	if got.DemandWorkers > 0 && s.Workers != min(s.Permits, got.DemandWorkers) {
		t.Errorf("Workers = %d, want min(%d permits, %d by Little's law)", s.Workers, s.Permits, got.DemandWorkers)
	}
	hasRate := got.UsableRatePerSecond > 0 && s.Permits > 0
	if hasRate != (s.Burst > 0) || (!hasRate && s.RatePerSecond != 0) {
		t.Errorf("usable rate %v, %d permits: rate %v, burst %d; want a rate and a burst ≥ 1 exactly when both are positive",
			got.UsableRatePerSecond, s.Permits, s.RatePerSecond, s.Burst)
	}
	if s.RatePerSecond > got.UsableRatePerSecond || int64(s.Burst) > max(got.UsableBurst, 1) {
		t.Errorf("share rate %v, burst %d above the usable %v, %d", s.RatePerSecond, s.Burst, got.UsableRatePerSecond, got.UsableBurst)
	}
	if in.RatePerSecond > 0 && in.Part == nil && s.RatePerSecond > in.RatePerSecond {
		t.Errorf("per-pod rate %v above the contract's %v", s.RatePerSecond, in.RatePerSecond)
	}
}

// randomInput draws inputs that are mostly valid, spread over realistic and
// extreme magnitudes, with an invalid field now and then.
func randomInput(r *rand.Rand) Input {
	pick := func(choices ...int64) int64 { return choices[r.IntN(len(choices))] }
	count := func() int {
		switch r.IntN(4) {
		case 0:
			return 1 + r.IntN(10)
		case 1:
			return 1 + r.IntN(1000)
		case 2:
			return 1 + r.IntN(MaxCount)
		default:
			return int(pick(1, 2, 7, 8, 40, 50, 100, MaxCount))
		}
	}
	duration := func() time.Duration {
		switch r.IntN(4) {
		case 0:
			return time.Duration(1 + r.Int64N(int64(time.Second)))
		case 1:
			return time.Duration(1 + r.Int64N(int64(time.Minute)))
		case 2:
			return time.Duration(1 + r.Int64N(math.MaxInt64-1))
		default:
			return time.Duration(pick(1, 220e6, 300e6, 1800e6, 2e9, math.MaxInt64))
		}
	}
	rate := func() float64 {
		switch r.IntN(5) {
		case 0:
			return 0
		case 1:
			return r.Float64() * 10
		case 2:
			return float64(r.IntN(100000))
		case 3:
			return r.Float64() * MaxRate
		default:
			return float64(pick(1, 1900, MaxRate))
		}
	}
	in := Input{
		Concurrency:          count(),
		SafetyPercent:        1 + r.IntN(100),
		Divisor:              count(),
		Latency:              duration(),
		Deadline:             duration(),
		DemandPerSecond:      rate(),
		MaxRetries:           r.IntN(11),
		RetryBudgetPerSecond: rate(),
		BelowOne:             BelowOnePolicy(r.IntN(2)),
	}
	if r.IntN(2) == 0 {
		in.RatePerSecond = rate()
		if in.RatePerSecond > 0 {
			in.Burst = count() - 1
		}
	}
	if r.IntN(2) == 0 {
		in.WorstLatency = in.Latency
		if room := math.MaxInt64 - in.Latency; room > 0 {
			in.WorstLatency += time.Duration(r.Int64N(int64(room)))
		}
	}
	if r.IntN(2) == 0 {
		// Up to twice the deadline, so that some waits get clamped.
		in.MaxQueueWait = dur(time.Duration(r.Int64N(int64(min(in.Deadline, math.MaxInt64/2)) * 2)))
	}
	if r.IntN(2) == 0 {
		in.AcquireTimeout = dur(duration())
	}
	switch r.IntN(4) {
	case 0:
		// This cluster's part of a contract shared across clusters.
		if in.Concurrency > 0 {
			in.ClusterConcurrency = 1 + r.IntN(in.Concurrency)
		}
	case 1:
		// A caller's part of a shared contract.
		pt := &Part{RatePerSecond: rate(), RetryBudgetPerSecond: rate()}
		if usable := in.Concurrency * in.SafetyPercent / 100; usable >= 0 && in.SafetyPercent <= 100 {
			pt.Permits = r.IntN(usable + 1)
		}
		if pt.RatePerSecond > 0 {
			pt.Burst = count() - 1
		}
		in.Part = pt
	}
	if r.IntN(10) == 0 {
		corrupt(r, &in)
	}
	return in
}

// corrupt makes one field of in invalid.
func corrupt(r *rand.Rand, in *Input) {
	switch r.IntN(13) {
	case 10:
		in.ClusterConcurrency = in.Concurrency + 1 + r.IntN(3)
	case 11:
		in.Part = &Part{Permits: -1 - r.IntN(3)}
		if r.IntN(2) == 0 {
			in.Part.Permits = in.Concurrency + 1
		}
	case 12:
		in.Part = &Part{Permits: 1, Burst: 1 + r.IntN(3)}
	case 0:
		in.Concurrency = -r.IntN(3)
	case 1:
		in.SafetyPercent = 101 + r.IntN(100)
	case 2:
		in.Divisor = 0
	case 3:
		in.Latency = -time.Duration(r.Int64N(1e9))
	case 4:
		in.Deadline = 0
	case 5:
		in.DemandPerSecond = nan()
	case 6:
		in.RatePerSecond = -1
	case 7:
		in.Burst, in.RatePerSecond = 1+r.IntN(10), 0
	case 8:
		in.WorstLatency = in.Latency - 1
	default:
		in.BelowOne = BelowOnePolicy(2 + r.IntN(5))
	}
}

func TestSizeInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(20260511, 3))
	const cases = 20000
	var valid, extra, strictBelowOne, overcommitted, burstRaised, cluster, part int
	for i := range cases {
		in := randomInput(r)
		got, err := Size(in)
		checkSizeOrError(t, in, got, err)
		if t.Failed() {
			t.Fatalf("case %d failed: %+v", i, in)
		}
		if err != nil {
			continue
		}
		valid++
		if got.Extra > 0 && got.Base > 0 {
			extra++
		}
		if got.Base == 0 && got.Extra > 0 {
			strictBelowOne++
		}
		if _, ok := hasReason(got.Diagnostics, ReasonOvercommitted); ok {
			overcommitted++
		}
		if _, ok := hasReason(got.Diagnostics, ReasonBurstRaisedToOne); ok {
			burstRaised++
		}
		if in.ClusterConcurrency > 0 && in.ClusterConcurrency < in.Concurrency {
			cluster++
		}
		if in.Part != nil {
			part++
		}
	}
	// The generator must reach the interesting regions, or the invariants
	// above prove little.
	if valid < cases*8/10 || extra < 500 || strictBelowOne < 100 || overcommitted < 100 || burstRaised < 100 || cluster < 1000 || part < 1000 {
		t.Errorf("random inputs: %d valid, %d with Base+1 pods, %d Strict with A < N, %d Overcommitted, %d BurstRaisedToOne, %d with a cluster share, %d with a part; the generator misses cases",
			valid, extra, strictBelowOne, overcommitted, burstRaised, cluster, part)
	}
}

func TestSweepInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for range 150 {
		in := randomInput(r)
		in.Concurrency = 1 + r.IntN(200)
		lo := 1 + r.IntN(250)
		hi := lo + r.IntN(100)
		got, err := Sweep(in, lo, hi)
		if err != nil {
			if in.Validate() == nil {
				t.Fatalf("Sweep(%+v, %d, %d) error = %v for a valid input", in, lo, hi, err)
			}
			continue
		}
		if len(got.Rows) != hi-lo+1 {
			t.Fatalf("Sweep(%d..%d) has %d rows", lo, hi, len(got.Rows))
		}
		first := 0
		for i, row := range got.Rows {
			if row.Replicas != lo+i {
				t.Fatalf("row %d has replicas %d, want %d", i, row.Replicas, lo+i)
			}
			in.Divisor = row.Replicas
			checkSize(t, in, row.Result)
			if t.Failed() {
				t.Fatalf("Sweep(%+v, %d, %d) row %d", in, lo, hi, row.Replicas)
			}
			if first == 0 && row.Result.Share < 1 {
				first = row.Replicas
			}
			// Under Strict every replica count uses all of A.
			if in.BelowOne == Strict && row.Result.TotalPermits != row.Result.Usable {
				t.Fatalf("Strict at %d replicas: %d permits in use of A = %d", row.Replicas, row.Result.TotalPermits, row.Result.Usable)
			}
			if i > 0 && row.Result.PerPod.Permits > got.Rows[i-1].Result.PerPod.Permits {
				t.Fatalf("permits rose from %d to %d as replicas grew to %d", got.Rows[i-1].Result.PerPod.Permits, row.Result.PerPod.Permits, row.Replicas)
			}
		}
		if got.FirstBelowOne != first {
			t.Fatalf("FirstBelowOne = %d, want %d (C %d, s %d%%, %d..%d)", got.FirstBelowOne, first, in.Concurrency, in.SafetyPercent, lo, hi)
		}
	}
}

func TestEvaluateInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	for range 10000 {
		p := Pool{
			Workers:  1 + r.IntN(1000),
			Queue:    r.IntN(100000),
			Latency:  time.Duration(1 + r.Int64N(int64(10*time.Second))),
			Deadline: time.Duration(1 + r.Int64N(int64(30*time.Second))),
		}
		got, err := Evaluate(p)
		if err != nil {
			t.Fatalf("Evaluate(%+v) error = %v", p, err)
		}
		checkFloat(t, "ThroughputPerSecond", got.ThroughputPerSecond)
		if got.MaxQueueWait < 0 || got.Total < got.MaxQueueWait || got.FitsDeadline != (got.Total <= p.Deadline) {
			t.Fatalf("Evaluate(%+v) = %+v: inconsistent", p, got)
		}
		// The largest queue that fits fits, and one more does not.
		largest := p
		largest.Queue = got.LargestQueueThatFits
		if fit, _ := Evaluate(largest); p.Deadline >= p.Latency && !fit.FitsDeadline {
			t.Fatalf("queue %d reported to fit %+v does not", largest.Queue, p)
		}
		largest.Queue++
		if fit, _ := Evaluate(largest); fit.FitsDeadline {
			t.Fatalf("queue %d, one above the largest that fits %+v, fits", largest.Queue, p)
		}
	}
}

func TestAmplificationInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 21))
	rate := func() float64 {
		switch r.IntN(3) {
		case 0:
			return r.Float64() * 1000
		case 1:
			return math.Ldexp(r.Float64(), r.IntN(80)-40)
		default:
			return r.Float64() * MaxRate
		}
	}
	for range 10000 {
		l := RetryLoad{CapacityPerSecond: rate(), ArrivalPerSecond: rate(), MaxRetries: r.IntN(11)}
		got, err := Amplification(l)
		checkAmplification(t, l, got, err)
		if t.Failed() {
			t.Fatalf("failed for %+v", l)
		}
	}
}

// checkAmplification asserts the guarantees of Amplification.
func checkAmplification(t *testing.T, l RetryLoad, got AmplificationResult, err error) {
	t.Helper()
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("Amplification(%+v) error = %v, want an *InputError", l, err)
		}
		valid := positiveRateIn("", l.CapacityPerSecond) == nil && positiveRateIn("", l.ArrivalPerSecond) == nil &&
			countIn("", l.MaxRetries, 0) == nil
		if valid || len(got.Rounds) != 0 {
			t.Fatalf("Amplification(%+v) = %+v, %v: valid input rejected or result returned with an error", l, got, err)
		}
		return
	}
	if len(got.Rounds) < 1 || len(got.Rounds) > MaxRounds {
		t.Fatalf("%d rounds, want 1..%d", len(got.Rounds), MaxRounds)
	}
	if got.SingleRound != got.Rounds[0] || got.FixedPoint != got.Rounds[len(got.Rounds)-1] {
		t.Errorf("SingleRound/FixedPoint are not the first/last rounds")
	}
	if got.DivergentWithoutLimit != (l.ArrivalPerSecond > l.CapacityPerSecond) {
		t.Errorf("DivergentWithoutLimit = %v for arrival %v, capacity %v", got.DivergentWithoutLimit, l.ArrivalPerSecond, l.CapacityPerSecond)
	}
	if !got.Converged && len(got.Rounds) != MaxRounds {
		t.Errorf("stopped after %d rounds without converging", len(got.Rounds))
	}
	limit := float64(l.MaxRetries) + 1
	prev := l.ArrivalPerSecond
	for i, round := range got.Rounds {
		checkFloat(t, "Rejection", round.Rejection)
		checkFloat(t, "Amplification", round.Amplification)
		checkFloat(t, "AttemptRatePerSecond", round.AttemptRatePerSecond)
		if round.Rejection > 1 || round.Amplification < 1 || round.Amplification > limit {
			t.Errorf("round %d = %+v: want rejection ≤ 1 and amplification in [1, %v]", i, round, limit)
		}
		if round.AttemptRatePerSecond < l.ArrivalPerSecond || round.AttemptRatePerSecond > l.ArrivalPerSecond*limit {
			t.Errorf("round %d attempt rate %v outside [%v, %v]", i, round.AttemptRatePerSecond, l.ArrivalPerSecond, l.ArrivalPerSecond*limit)
		}
		// Retries only add load: the attempt rate does not fall (up to
		// rounding in the last places).
		if round.AttemptRatePerSecond < prev*(1-1e-12) {
			t.Errorf("round %d attempt rate fell from %v to %v", i, prev, round.AttemptRatePerSecond)
		}
		prev = round.AttemptRatePerSecond
	}
	if l.MaxRetries == 0 && got.FixedPoint.Amplification != 1 {
		t.Errorf("no retries amplified by %v", got.FixedPoint.Amplification)
	}
	if l.ArrivalPerSecond <= l.CapacityPerSecond && (got.FixedPoint.Rejection != 0 || got.FixedPoint.Amplification != 1) {
		t.Errorf("arrival %v within capacity %v, but %+v", l.ArrivalPerSecond, l.CapacityPerSecond, got.FixedPoint)
	}
}

func TestBacklogInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 55))
	for range 10000 {
		q := 1 + r.IntN(1_000_000)
		buf := time.Duration(1 + r.Int64N(int64(time.Hour)))
		target := r.Float64()*1e6 + 1e-3
		b := BacklogInput{
			ArrivalPerSecond: math.Ldexp(r.Float64(), r.IntN(40)) + 1e-6,
			Workers:          1 + r.IntN(10000),
			Latency:          time.Duration(1 + r.Int64N(int64(time.Minute))),
			Queue:            &q, Buffer: &buf, TargetPerSecond: &target,
		}
		got, err := Backlog(b)
		if err != nil {
			t.Fatalf("Backlog(%+v) error = %v", b, err)
		}
		checkFloat(t, "ConsumerPerSecond", got.ConsumerPerSecond)
		if math.IsNaN(got.GrowthPerSecond) || math.IsInf(got.GrowthPerSecond, 0) {
			t.Fatalf("GrowthPerSecond = %v", got.GrowthPerSecond)
		}
		if (got.TimeToFill != nil) != (got.GrowthPerSecond > 0) || (got.TimeToFill != nil && *got.TimeToFill < 0) {
			t.Fatalf("growth %v, TimeToFill %v", got.GrowthPerSecond, got.TimeToFill)
		}
		checkCount(t, "QueueForBuffer", *got.QueueForBuffer)
		checkCount(t, "WorkersForTarget", *got.WorkersForTarget)
		if (*got.QueueForBuffer == 0) != (got.GrowthPerSecond <= 0) {
			t.Fatalf("growth %v but queue for a %s buffer is %d", got.GrowthPerSecond, buf, *got.QueueForBuffer)
		}
		// The workers for the target do sustain it.
		if sustain := perSecond(int64(*got.WorkersForTarget), b.Latency); *got.WorkersForTarget < MaxCount && sustain < target*(1-1e-12) {
			t.Fatalf("%d workers at %s sustain %v/s, below the target %v/s", *got.WorkersForTarget, b.Latency, sustain, target)
		}
	}
}
