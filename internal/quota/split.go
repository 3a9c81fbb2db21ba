package quota

import (
	"fmt"
	"math"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// Caller is one quota sharing a DownstreamContract, as Split sees it.
type Caller struct {
	// Key names the caller, "<namespace>/<name>" of its quota; it breaks
	// ties in the split.
	Key string
	// Spec is the caller's quota spec: its weight, demand and latency.
	Spec v1alpha1.DownstreamQuotaSpec
	// Serving is the number of the caller's pods that are Ready and not
	// leaving; a caller without any demands nothing.
	Serving int64
}

// CallerPart is one caller's part of a shared contract.
type CallerPart struct {
	// Part is the caller's part of the usable permits, rate, burst and
	// retry budget, for SizePart.
	Part sizing.Part
	// Weight is the caller's weight (at least 1).
	Weight int32
	// Demand is the calls in flight the caller can use;
	// division.Unbounded when it stated none.
	Demand int64
	// Reason says why the part is what it is, with the arithmetic.
	Reason string
}

// ContractUsable returns a shared contract's usable permits: floor(C'·s)
// for this cluster's part C' of the concurrency and the contract's safety
// percentage (80 when empty).
func ContractUsable(c v1alpha1.DownstreamContractSpec) int64 {
	return int64(ClusterConcurrency(c.Contract)) * int64(contractSafety(c)) / 100
}

func contractSafety(c v1alpha1.DownstreamContractSpec) int32 {
	if c.SafetyPercent == 0 {
		return DefaultSafetyPercent
	}
	return c.SafetyPercent
}

// callerDemand returns the calls in flight a caller can use:
// spec.demand.inFlight, or its rate × typical latency rounded up, or
// division.Unbounded; 0 without serving pods.
func callerDemand(spec v1alpha1.DownstreamQuotaSpec, serving int64) int64 {
	d := spec.Demand
	switch {
	case serving == 0:
		return 0
	case d == nil:
		return division.Unbounded
	case d.InFlight != nil:
		return int64(*d.InFlight)
	case d.RatePerSecond > 0:
		return int64(math.Ceil(float64(d.RatePerSecond) * spec.Latency.Typical.Seconds()))
	}
	return division.Unbounded
}

// callerWeight returns a caller's weight: spec.weight, at least 1.
func callerWeight(spec v1alpha1.DownstreamQuotaSpec) int32 { return max(spec.Weight, 1) }

// Split divides a shared contract's usable permits over its callers by
// weighted max-min fairness capped at each caller's demand
// (division.FairShare), and the usable rate with them (FairShareFloat, the
// demand in calls per second); each caller's burst follows its part of the
// rate and its retry budget its part of the permits. A caller without
// serving pods gets nothing. The operator's DownstreamContract controller
// and kubectl-backpressure both call it, so the CLI shows the parts the
// operator hands out. Parts are aligned with callers.
func Split(contract v1alpha1.DownstreamContractSpec, callers []Caller) []CallerPart {
	out := make([]CallerPart, len(callers))
	if len(callers) == 0 {
		return out
	}
	usable := ContractUsable(contract)
	claims := make([]division.Claim, len(callers))
	rateClaims := make([]division.ClaimFloat, len(callers))
	var weights int64
	for i, c := range callers {
		d := callerDemand(c.Spec, c.Serving)
		w := int64(callerWeight(c.Spec))
		weights += w
		claims[i] = division.Claim{Name: c.Key, Weight: w, Demand: d}
		rd := math.Inf(1)
		switch {
		case c.Serving == 0:
			rd = 0
		case c.Spec.Demand != nil && c.Spec.Demand.RatePerSecond > 0:
			rd = float64(c.Spec.Demand.RatePerSecond)
		case d != division.Unbounded && c.Spec.Latency.Typical.Duration > 0:
			rd = float64(d) / c.Spec.Latency.Typical.Seconds()
		}
		rateClaims[i] = division.ClaimFloat{Name: c.Key, Weight: w, Demand: rd}
	}
	// A caller without serving pods takes no part, not even of a surplus
	// the others cannot use: it has no pod to hold a permit.
	permits := ofServing(claims, callers, func(c []division.Claim) []int64 { return division.FairShare(usable, c) })
	k := contract.Contract
	cc, safety := int64(ClusterConcurrency(k)), int64(contractSafety(contract))
	var usableRate float64
	var usableBurst int64
	rates := make([]float64, len(callers))
	if k.RatePerSecond > 0 {
		usableRate = float64(k.RatePerSecond) * float64(cc*safety) / float64(100*int64(k.Concurrency))
		usableBurst = int64(k.Burst) * cc * safety / (100 * int64(k.Concurrency))
		rates = ofServing(rateClaims, callers, func(c []division.ClaimFloat) []float64 { return division.FairShareFloat(usableRate, c) })
	}
	for i, cl := range claims {
		p := &out[i]
		p.Weight, p.Demand = int32(cl.Weight), cl.Demand
		p.Part.Permits = int(permits[i])
		if usableRate > 0 {
			p.Part.RatePerSecond = rates[i]
			p.Part.Burst = int(float64(usableBurst) * rates[i] / usableRate)
		}
		if usable > 0 {
			p.Part.RetryBudgetPerSecond = float64(contract.RetryBudgetPerSecond) * float64(permits[i]) / float64(usable)
		}
		switch {
		case cl.Demand == 0:
			p.Reason = fmt.Sprintf("no Ready pods: demands nothing, gets %d", permits[i])
		case cl.Demand != division.Unbounded && permits[i] == cl.Demand:
			p.Reason = fmt.Sprintf("its demand of %d in flight is met (weight %d of %d)", cl.Demand, cl.Weight, weights)
		default:
			p.Reason = fmt.Sprintf("weighted max-min fair share of %d usable permits at weight %d of %d: %d", usable, cl.Weight, weights, permits[i])
		}
	}
	return out
}

// ValidateContract checks a DownstreamContract's spec as its schema does,
// so that a file that did not pass through an API server gets the same
// answer; the first problem is a *FieldError naming
// downstreamContract.spec.<field>.
func ValidateContract(c v1alpha1.DownstreamContractSpec) error {
	k := c.Contract
	field := func(name, format string, args ...any) error {
		return &FieldError{Field: "downstreamContract.spec." + name, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case k.Concurrency < 1:
		return field("contract.concurrency", "must be at least 1, got %d", k.Concurrency)
	case k.RatePerSecond < 0:
		return field("contract.ratePerSecond", "must not be negative, got %d", k.RatePerSecond)
	case k.Burst < 0:
		return field("contract.burst", "must be at least 0, got %d", k.Burst)
	case k.Burst > 0 && k.RatePerSecond == 0:
		return field("contract.burst", "requires a rate greater than 0, got %d with no rate", k.Burst)
	case c.SafetyPercent < 0 || c.SafetyPercent > 100:
		return field("safetyPercent", "must be between 1 and 100, got %d", c.SafetyPercent)
	case c.RetryBudgetPerSecond < 0:
		return field("retryBudgetPerSecond", "must not be negative, got %d", c.RetryBudgetPerSecond)
	}
	return validateClusterShare(k, SharedContractField+".clusterShare")
}

// ofServing applies share to the claims of the callers with serving pods
// and gives the others the zero value: a caller without a pod to hold a
// permit takes no part, not even of a surplus.
func ofServing[C, R any](claims []C, callers []Caller, share func([]C) []R) []R {
	var in []C
	var idx []int
	for i, c := range callers {
		if c.Serving > 0 {
			in, idx = append(in, claims[i]), append(idx, i)
		}
	}
	out := make([]R, len(callers))
	for j, part := range share(in) {
		out[idx[j]] = part
	}
	return out
}
