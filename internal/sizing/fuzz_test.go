package sizing

import (
	"math"
	"testing"
	"time"
)

// FuzzSize checks the package's guarantees on arbitrary inputs: no panic,
// an *InputError for invalid input, and for valid input every invariant of
// checkSize (Base·N + Extra = A ≤ C'·s ≤ C unless AtLeastOne said so, the
// shares summing to the usable totals, workers and waiting room following
// each pod's permits, no negative, NaN or infinite figure, queue and
// timeouts within the deadline).
func FuzzSize(f *testing.F) {
	type seed struct {
		c, burst, pct, n           int64
		rate, demand, budget       float64
		w, wmax, d, mqw, acq       int64
		hasMQW, hasAcq, atLeastOne bool
		retries                    int64
		cluster                    int64
		hasPart                    bool
		partPermits, partBurst     int64
		partRate, partBudget       float64
	}
	ms := int64(time.Millisecond)
	for _, s := range []seed{
		// The design example and the sample quota.
		{c: 50, pct: 80, n: 8, demand: 1900, budget: 10, w: 220 * ms, wmax: 1800 * ms, d: 2000 * ms, mqw: 100 * ms, acq: 200 * ms, hasMQW: true, hasAcq: true, retries: 1},
		{c: 50, pct: 80, n: 8, w: 220 * ms, wmax: 1800 * ms, d: 300 * ms},
		// Below one, both policies; deadline below latency; clamped wait.
		{c: 50, pct: 80, n: 100, w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: 100, w: 220 * ms, d: 300 * ms, atLeastOne: true},
		{c: 1, pct: 1, n: 1, w: 1, d: 1, atLeastOne: true},
		{c: 50, pct: 80, n: 8, w: 220 * ms, d: 200 * ms, mqw: 50 * ms, hasMQW: true},
		{c: 50, pct: 80, n: 8, w: 220 * ms, d: 300 * ms, mqw: 100 * ms, hasMQW: true},
		// Rate, burst, extremes.
		{c: 50, burst: 4, pct: 80, n: 8, rate: 1000, w: 220 * ms, d: 300 * ms},
		{c: MaxCount, burst: MaxCount, pct: 100, n: 1, rate: MaxRate, demand: MaxRate, budget: MaxRate, w: 1, wmax: math.MaxInt64, d: math.MaxInt64, retries: MaxCount},
		{c: MaxCount, pct: 100, n: MaxCount, w: math.MaxInt64, d: math.MaxInt64, mqw: math.MaxInt64, hasMQW: true},
		// Exact division with pods at Base+1; A < N under Strict with a
		// rate whose burst is raised to one.
		{c: 50, pct: 80, n: 7, w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: 21, rate: 100, burst: 20, demand: 100, budget: 3, w: 220 * ms, d: 300 * ms},
		{c: 50, burst: 20, pct: 80, n: 100, rate: 100, w: 220 * ms, d: 300 * ms},
		// A cluster's share, a caller's part.
		{c: 50, pct: 80, n: 3, cluster: 20, rate: 100, burst: 20, w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: 4, hasPart: true, partPermits: 21, partRate: 30, partBurst: 5, partBudget: 6, w: 220 * ms, d: 2000 * ms},
		{c: 50, pct: 80, n: 4, hasPart: true, w: 220 * ms, d: 300 * ms},
		// Invalid.
		{c: 50, pct: 80, n: 4, cluster: 51, w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: 4, hasPart: true, partPermits: 41, w: 220 * ms, d: 300 * ms},
		{c: 0, pct: 80, n: 8, w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: 8, rate: math.NaN(), w: 220 * ms, d: 300 * ms},
		{c: 50, pct: 80, n: -1, w: 220 * ms, d: 300 * ms},
	} {
		f.Add(s.c, s.rate, s.burst, s.pct, s.n, s.w, s.wmax, s.d, s.mqw, s.hasMQW, s.acq, s.hasAcq, s.demand, s.retries, s.budget, s.atLeastOne,
			s.cluster, s.hasPart, s.partPermits, s.partRate, s.partBurst, s.partBudget)
	}
	f.Fuzz(func(t *testing.T, c int64, rate float64, burst, pct, n, w, wmax, d, mqw int64, hasMQW bool,
		acq int64, hasAcq bool, demand float64, retries int64, budget float64, atLeastOne bool,
		cluster int64, hasPart bool, partPermits int64, partRate float64, partBurst int64, partBudget float64) {
		in := Input{
			Concurrency:          clampInt(c),
			RatePerSecond:        rate,
			Burst:                clampInt(burst),
			SafetyPercent:        clampInt(pct),
			Divisor:              clampInt(n),
			Latency:              time.Duration(w),
			WorstLatency:         time.Duration(wmax),
			Deadline:             time.Duration(d),
			DemandPerSecond:      demand,
			MaxRetries:           clampInt(retries),
			RetryBudgetPerSecond: budget,
			ClusterConcurrency:   clampInt(cluster),
		}
		if hasPart {
			in.Part = &Part{Permits: clampInt(partPermits), RatePerSecond: partRate, Burst: clampInt(partBurst), RetryBudgetPerSecond: partBudget}
		}
		if hasMQW {
			in.MaxQueueWait = dur(time.Duration(mqw))
		}
		if hasAcq {
			in.AcquireTimeout = dur(time.Duration(acq))
		}
		if atLeastOne {
			in.BelowOne = AtLeastOne
		}
		got, err := Size(in)
		checkSizeOrError(t, in, got, err)
	})
}

// FuzzAmplification checks Amplification on arbitrary inputs: no panic, an
// *InputError for invalid input, and otherwise rejection in [0, 1],
// amplification in [1, r+1], an attempt rate that never falls and stays in
// [λ, λ·(r+1)], at most MaxRounds rounds.
func FuzzAmplification(f *testing.F) {
	f.Add(100.0, 150.0, int64(1))
	f.Add(100.0, 80.0, int64(3))
	f.Add(181.8, 1900.0, int64(1))
	f.Add(1e-8, 1e12, int64(10))
	f.Add(100.0, 100.0000001, int64(10))
	f.Add(5e-324, MaxRate, int64(MaxCount))
	f.Add(0.0, 1.0, int64(1))
	f.Add(math.Inf(1), 1.0, int64(1))
	f.Add(1.0, 1.0, int64(-1))
	f.Fuzz(func(t *testing.T, capacity, arrival float64, retries int64) {
		l := RetryLoad{CapacityPerSecond: capacity, ArrivalPerSecond: arrival, MaxRetries: clampInt(retries)}
		got, err := Amplification(l)
		checkAmplification(t, l, got, err)
	})
}

// clampInt converts a fuzzed int64 to an int on every platform; a value
// beyond 32 bits becomes -1, which every count input rejects.
func clampInt(v int64) int {
	if v > math.MaxInt32 || v < math.MinInt32 {
		return -1
	}
	return int(v)
}
