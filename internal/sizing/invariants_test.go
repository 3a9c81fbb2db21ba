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

// checkPlanOrError checks the outcome of Plan(in), valid or not.
func checkPlanOrError(t *testing.T, in Input, got PlanResult, err error) {
	t.Helper()
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) || !inputNames[ie.Input] {
			t.Fatalf("Plan(%+v) error = %v, want an *InputError naming an input", in, err)
		}
		if diff := cmp.Diff(PlanResult{}, got); diff != "" {
			t.Fatalf("Plan(%+v) returned a plan with its error (-want +got):\n%s", in, diff)
		}
		if in.Validate() == nil {
			t.Fatalf("Plan(%+v) failed with %v but Validate accepts the input", in, err)
		}
		return
	}
	checkPlan(t, in, got)
}

// checkPlan asserts the guarantees of the package doc on one valid plan.
func checkPlan(t *testing.T, in Input, got PlanResult) {
	t.Helper()
	pp := got.PerPod
	c, n, pct := int64(in.Concurrency), int64(in.Divisor), int64(in.SafetyPercent)

	// Permits: floor(C·s/N), and within the contract unless AtLeastOne said so.
	share := c * pct / (100 * n)
	_, tooSmall := hasReason(got.Diagnostics, ReasonQuotaTooSmall)
	over, overcommitted := hasReason(got.Diagnostics, ReasonOvercommitted)
	switch {
	case share >= 1:
		if int64(pp.Permits) != share || tooSmall || overcommitted {
			t.Errorf("permits = %d (tooSmall %v, overcommitted %v), want floor(%d·%d%%/%d) = %d and no below-one diagnostic",
				pp.Permits, tooSmall, overcommitted, c, pct, n, share)
		}
		if int64(pp.Permits)*n > c*pct/100 {
			t.Errorf("permits %d × %d replicas exceed C·s = %d·%d%%", pp.Permits, n, c, pct)
		}
	case in.BelowOne == Strict:
		if pp.Permits != 0 || !tooSmall || overcommitted {
			t.Errorf("Strict below one: permits = %d, QuotaTooSmall %v, Overcommitted %v; want 0, true, false", pp.Permits, tooSmall, overcommitted)
		}
	default:
		if pp.Permits != 1 || !overcommitted || tooSmall {
			t.Errorf("AtLeastOne below one: permits = %d, Overcommitted %v, QuotaTooSmall %v; want 1, true, false", pp.Permits, overcommitted, tooSmall)
		}
		if want := fmt.Sprintf("hold up to %d in flight", n); !strings.Contains(over.Message, want) {
			t.Errorf("Overcommitted message %q does not state the real total %q", over.Message, want)
		}
	}
	if got.TotalPermits != int64(pp.Permits)*n {
		t.Errorf("TotalPermits = %d, want %d × %d", got.TotalPermits, pp.Permits, n)
	}
	if got.TotalPermits > c && !overcommitted {
		t.Errorf("pods hold %d in flight over a contract of %d without an Overcommitted diagnostic", got.TotalPermits, c)
	}

	// Every figure is finite and not negative; every count in range.
	for name, f := range map[string]float64{
		"RatePerSecond": pp.RatePerSecond, "CapacityPerSecond": pp.CapacityPerSecond,
		"RetryBudgetPerSecond": pp.RetryBudgetPerSecond, "Share": got.Share,
	} {
		checkFloat(t, name, f)
	}
	for name, v := range map[string]int{
		"Permits": pp.Permits, "Burst": pp.Burst, "QueueCapacity": pp.QueueCapacity,
		"Workers": pp.Workers, "DemandWorkers": got.DemandWorkers,
	} {
		checkCount(t, name, v)
	}
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
	wantQueue := new(big.Int).Mul(big.NewInt(int64(pp.Permits)), big.NewInt(int64(pp.MaxQueueWait)))
	wantQueue.Quo(wantQueue, big.NewInt(int64(in.Latency)))
	if wantQueue.Cmp(big.NewInt(MaxCount)) > 0 {
		wantQueue.SetInt64(MaxCount)
	}
	if int64(pp.QueueCapacity) != wantQueue.Int64() {
		t.Errorf("QueueCapacity = %d, want floor(%d × %s / %s) = %s", pp.QueueCapacity, pp.Permits, pp.MaxQueueWait, in.Latency, wantQueue)
	}
	if in.WorstLatency > 0 && in.Deadline > in.Latency && in.WorstLatency > in.Deadline-pp.MaxQueueWait {
		if _, ok := hasReason(got.Diagnostics, ReasonWorstLatencyExceedsDeadline); !ok {
			t.Errorf("queue wait %s + worst latency %s exceed deadline %s without a diagnostic", pp.MaxQueueWait, in.WorstLatency, in.Deadline)
		}
	}

	// Workers, rate, burst.
	if pp.Workers > pp.Permits {
		t.Errorf("Workers %d > Permits %d", pp.Workers, pp.Permits)
	}
	if pp.Permits > 0 && pp.Workers < 1 {
		t.Errorf("Workers = %d with %d permits, want at least 1", pp.Workers, pp.Permits)
	}
	if (in.RatePerSecond == 0) != (pp.Burst == 0) {
		t.Errorf("rate %v gave burst %d; want burst 0 exactly when there is no rate", in.RatePerSecond, pp.Burst)
	}
	if in.RatePerSecond > 0 && pp.RatePerSecond > in.RatePerSecond {
		t.Errorf("per-pod rate %v above the contract's %v", pp.RatePerSecond, in.RatePerSecond)
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

	for _, d := range got.Diagnostics {
		if !knownReasons[d.Reason] || d.Message == "" || strings.Contains(d.Message, "%!") ||
			strings.Contains(d.Message, "NaN") || strings.Contains(d.Message, "Inf") {
			t.Errorf("diagnostic %+v: want a known reason and a formatted message", d)
		}
	}

	// Deterministic.
	again, err := Plan(in)
	if err != nil {
		t.Fatalf("second Plan() error = %v", err)
	}
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("Plan() is not deterministic (-first +second):\n%s", diff)
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
	if r.IntN(10) == 0 {
		corrupt(r, &in)
	}
	return in
}

// corrupt makes one field of in invalid.
func corrupt(r *rand.Rand, in *Input) {
	switch r.IntN(10) {
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

func TestPlanInvariantsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(20260511, 3))
	const cases = 10000
	var valid, belowOne, overcommitted int
	for i := range cases {
		in := randomInput(r)
		got, err := Plan(in)
		checkPlanOrError(t, in, got, err)
		if t.Failed() {
			t.Fatalf("case %d failed: %+v", i, in)
		}
		if err == nil {
			valid++
			if _, ok := hasReason(got.Diagnostics, ReasonQuotaTooSmall); ok {
				belowOne++
			}
			if _, ok := hasReason(got.Diagnostics, ReasonOvercommitted); ok {
				overcommitted++
			}
		}
	}
	// The generator must reach the interesting regions, or the invariants
	// above prove little.
	if valid < cases*8/10 || belowOne < 100 || overcommitted < 100 {
		t.Errorf("random inputs: %d valid, %d QuotaTooSmall, %d Overcommitted; the generator misses cases", valid, belowOne, overcommitted)
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
			checkPlan(t, in, row.Plan)
			if t.Failed() {
				t.Fatalf("Sweep(%+v, %d, %d) row %d", in, lo, hi, row.Replicas)
			}
			if first == 0 && row.Plan.Share < 1 {
				first = row.Replicas
			}
			if i > 0 && row.Plan.PerPod.Permits > got.Rows[i-1].Plan.PerPod.Permits {
				t.Fatalf("permits rose from %d to %d as replicas grew to %d", got.Rows[i-1].Plan.PerPod.Permits, row.Plan.PerPod.Permits, row.Replicas)
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
