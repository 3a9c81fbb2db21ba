package sizing

import (
	"math"
	"math/big"
	"math/bits"
	"time"
)

// Exact arithmetic. Products of counts and nanoseconds overflow int64 long
// before the inputs are absurd, and floating-point products such as
// 1900 × 0.22 land a hair above or below the integer they should be, which
// floor and ceil then turn into an off-by-one. So products are computed in
// 128 bits or as exact rationals, and rounded once.

const nanosPerSecond = int64(time.Second)

// mulDivFloor returns floor(a·b/c) for a, b ≥ 0 and c > 0, saturating at
// math.MaxInt64.
func mulDivFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulDivCeil returns ceil(a·b/c) for a, b ≥ 0 and c > 0, saturating at
// math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if q >= math.MaxInt64 {
		return math.MaxInt64
	}
	if r > 0 {
		q++
	}
	return int64(q)
}

// ratio returns x·num/den for finite x and den ≠ 0, computed exactly and
// rounded once to the nearest float64.
func ratio(x float64, num, den int64) float64 {
	r := new(big.Rat).SetFloat64(x)
	r.Mul(r, new(big.Rat).SetFrac64(num, den))
	f, _ := r.Float64()
	return f
}

// ceilRatio returns ceil(x·num/den) for finite x ≥ 0, num ≥ 0 and den > 0,
// saturating at limit.
func ceilRatio(x float64, num, den, limit int64) int64 {
	r := new(big.Rat).SetFloat64(x)
	r.Mul(r, new(big.Rat).SetFrac64(num, den))
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > limit {
		return limit
	}
	return q.Int64()
}

// perSecond returns the rate at which n calls of duration d complete, n/d.
func perSecond(n int64, d time.Duration) float64 {
	return ratio(float64(n), nanosPerSecond, int64(d))
}

// inFlight returns Little's L = rate × d.
func inFlight(rate float64, d time.Duration) float64 {
	return ratio(rate, int64(d), nanosPerSecond)
}

// addDurations adds two non-negative durations, saturating.
func addDurations(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// secondsToDuration converts non-negative seconds to a duration, saturating.
func secondsToDuration(s float64) time.Duration {
	ns := s * float64(nanosPerSecond)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// capCount limits a non-negative count to MaxCount.
func capCount(v int64) int {
	if v > MaxCount {
		return MaxCount
	}
	return int(v)
}
