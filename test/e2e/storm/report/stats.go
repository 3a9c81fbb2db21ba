package report

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of ds by the nearest-rank
// method, and 0 for no data. It sorts a copy.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return percentileSorted(s, q)
}

func percentileSorted(s []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Quantiles is the median and the 99th percentile of a set of durations.
type Quantiles struct {
	Count int
	P50   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// QuantilesOf summarises ds.
func QuantilesOf(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Quantiles{Count: len(s), P50: percentileSorted(s, 0.5), P99: percentileSorted(s, 0.99), Max: s[len(s)-1]}
}
