package lossmodel

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Streams of the seed: each random quantity has its own, so that changing
// how one is drawn (or how many calls a pod receives) leaves the others as
// they were.
const (
	streamArrivals = 1 // inter-arrival times and latencies
	streamRouting  = 2 // the balancer's choices
	streamWeights  = 3 // the pinned weights
)

// Weights returns the part of the calls each of pods pinned pods receives:
// w_p = exp(skew × Z_p) / Σ exp(skew × Z_q), Z standard normal, drawn from
// seed. They sum to 1; a skew of 0 gives every pod 1/pods. The storm pins
// its connections with the same function and seed, so that its
// measurement and this model see the same imbalance.
func Weights(seed uint64, pods int, skew float64) []float64 {
	w := make([]float64, pods)
	r := rand.New(rand.NewPCG(seed, streamWeights))
	var sum float64
	for i := range w {
		w[i] = math.Exp(skew * r.NormFloat64())
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// weights returns each pod's part of the calls under s's balancer.
func (s Scenario) weights() []float64 {
	if s.balancer() == Pinned {
		return Weights(s.Seed, s.Pods, s.Skew)
	}
	w := make([]float64, s.Pods)
	for i := range w {
		w[i] = 1 / float64(s.Pods)
	}
	return w
}

// Shares returns the permits each pod holds in s: the A − R permits outside
// the reserve, divided as s.Sharing says, or s.PodShares when set. They
// sum to A − R.
func (s Scenario) Shares() []int {
	if err := s.Validate(); err != nil {
		return nil
	}
	return s.shares(s.weights())
}

func (s Scenario) shares(w []float64) []int {
	if s.PodShares != nil {
		return slices.Clone(s.PodShares)
	}
	total := s.Permits - s.Reserve
	if s.Sharing != DemandShares {
		out := make([]int, s.Pods)
		for i := range out {
			out[i] = total / s.Pods
			if i < total%s.Pods {
				out[i]++
			}
		}
		return out
	}
	floor := float64(min(s.Floor, total/s.Pods))
	demand := make([]float64, s.Pods)
	for i, wi := range w {
		demand[i] = wi * s.Load * float64(s.Permits)
	}
	return largestRemainder(waterFill(float64(total), floor, demand), total)
}

// waterFill divides total over the pods by max-min fairness capped at each
// pod's demand, with no pod below floor; what is left once every pod has
// its demand is split evenly. It assumes total ≥ floor × pods.
func waterFill(total, floor float64, demand []float64) []float64 {
	at := func(level float64) (sum float64) {
		for _, d := range demand {
			sum += max(floor, min(d, level))
		}
		return sum
	}
	out := make([]float64, len(demand))
	if capped := at(math.Inf(1)); capped <= total {
		surplus := (total - capped) / float64(len(demand))
		for i, d := range demand {
			out[i] = max(floor, d) + surplus
		}
		return out
	}
	lo, hi := 0.0, total
	for range 100 {
		mid := (lo + hi) / 2
		if at(mid) > total {
			hi = mid
		} else {
			lo = mid
		}
	}
	for i, d := range demand {
		out[i] = max(floor, min(d, lo))
	}
	return out
}

// largestRemainder rounds real shares to integers that sum to total: every
// share rounded down, then one more to the largest fractions (ties to the
// lower index).
func largestRemainder(real []float64, total int) []int {
	out := make([]int, len(real))
	left := total
	for i, r := range real {
		out[i] = int(math.Floor(r))
		left -= out[i]
	}
	order := make([]int, len(real))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(real[b]-math.Floor(real[b]), real[a]-math.Floor(real[a]))
	})
	for i := 0; left > 0; i = (i + 1) % len(order) {
		out[order[i]]++
		left--
	}
	return out
}
