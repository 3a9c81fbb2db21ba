package quota

import (
	"fmt"
	"math"
	"slices"
	"strings"

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

// DefaultMaxWeightPerNamespace is a contract's spec.maxWeightPerNamespace
// when empty: each namespace weighs as much as any other.
const DefaultMaxWeightPerNamespace int32 = 1

// ContractMaxWeightPerNamespace returns the most weight one namespace's
// callers hold together: spec.maxWeightPerNamespace, or
// DefaultMaxWeightPerNamespace when empty.
func ContractMaxWeightPerNamespace(c v1alpha1.DownstreamContractSpec) int32 {
	if c.MaxWeightPerNamespace < 1 {
		return DefaultMaxWeightPerNamespace
	}
	return c.MaxWeightPerNamespace
}

// Split divides a shared contract's usable permits over its callers by
// weighted max-min fairness capped at each caller's demand
// (division.FairShare), and the usable rate with them (FairShareFloat, the
// demand in calls per second); each caller's burst follows its part of the
// rate and its retry budget its part of the permits. A caller without
// serving pods gets nothing. The operator's DownstreamContract controller
// and kubectl-backpressure both call it, so the CLI shows the parts the
// operator hands out. Parts are aligned with callers.
//
// The division is by namespace first, the namespace of a caller being its
// Key up to the "/": each namespace with serving callers claims with the
// weight of its callers together, capped at the contract's
// maxWeightPerNamespace, and the demand of its callers together; then each
// namespace's part is divided over its own callers the same way, by their
// own weights and demands. A tenant therefore cannot grow its namespace's
// part beyond the cap by raising a weight or by adding quotas: what it
// states only divides its own part. With one caller per namespace, each
// weighing no more than the cap, the result is the same as dividing over
// the callers directly.
func Split(contract v1alpha1.DownstreamContractSpec, callers []Caller) []CallerPart {
	out := make([]CallerPart, len(callers))
	if len(callers) == 0 {
		return out
	}
	usable := ContractUsable(contract)
	claims := make([]division.Claim, len(callers))
	rateClaims := make([]division.ClaimFloat, len(callers))
	for i, c := range callers {
		d := callerDemand(c.Spec, c.Serving)
		w := int64(callerWeight(c.Spec))
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
	limit := int64(ContractMaxWeightPerNamespace(contract))
	tenants := byNamespace(callers, claims, rateClaims, limit)
	// The weights every namespace states, capped, callers without pods
	// included: the total a reason counts a weight against.
	stated := map[string]int64{}
	for _, c := range callers {
		ns, _, _ := strings.Cut(c.Key, "/")
		stated[ns] += int64(callerWeight(c.Spec))
	}
	var weights int64
	for _, w := range stated {
		weights += min(w, limit)
	}
	// A caller without serving pods takes no part, not even of a surplus
	// the others cannot use: it has no pod to hold a permit. Namespaces
	// hold only their serving callers.
	nsPermits := division.FairShare(usable, namespaceClaims(tenants))
	permits := make([]int64, len(callers))
	for j, n := range tenants {
		n.permits = nsPermits[j]
		for k, part := range division.FairShare(nsPermits[j], n.callerClaims(claims)) {
			permits[n.callers[k]] = part
		}
	}
	k := contract.Contract
	cc, safety := int64(ClusterConcurrency(k)), int64(contractSafety(contract))
	var usableRate float64
	var usableBurst int64
	rates := make([]float64, len(callers))
	if k.RatePerSecond > 0 {
		usableRate = float64(k.RatePerSecond) * float64(cc*safety) / float64(100*int64(k.Concurrency))
		usableBurst = int64(k.Burst) * cc * safety / (100 * int64(k.Concurrency))
		nsRates := division.FairShareFloat(usableRate, namespaceRateClaims(tenants))
		for j, n := range tenants {
			for k, part := range division.FairShareFloat(nsRates[j], n.callerRateClaims(rateClaims)) {
				rates[n.callers[k]] = part
			}
		}
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
		n := tenantOf(tenants, i)
		switch {
		case cl.Demand == 0:
			p.Reason = fmt.Sprintf("no Ready pods: demands nothing, gets %d", permits[i])
		case n.alone():
			// One caller, within the cap: the namespace's part is its own,
			// and says so as a part of the contract.
			if cl.Demand != division.Unbounded && permits[i] == cl.Demand {
				p.Reason = fmt.Sprintf("its demand of %d in flight is met (weight %d of %d)", cl.Demand, cl.Weight, weights)
			} else {
				p.Reason = fmt.Sprintf("weighted max-min fair share of %d usable permits at weight %d of %d: %d", usable, cl.Weight, weights, permits[i])
			}
		default:
			p.Reason = n.reason(usable, weights) + "; " + n.callerReason(cl, permits[i])
		}
	}
	return out
}

// tenant is one namespace's callers, as the first level of Split sees them.
type tenant struct {
	namespace string
	// callers are the indexes of the namespace's serving callers.
	callers []int
	// stated is their weights together; claim is the namespace's claim,
	// its weight stated capped at the contract's maximum.
	stated    int64
	claim     division.Claim
	rateClaim division.ClaimFloat
	limit     int64
	permits   int64
}

// byNamespace groups the serving callers by namespace, in namespace order,
// and makes each namespace's claims: its callers' weights together, capped
// at limit, and their demands together.
func byNamespace(callers []Caller, claims []division.Claim, rateClaims []division.ClaimFloat, limit int64) []*tenant {
	index := map[string]*tenant{}
	var out []*tenant
	for i, c := range callers {
		if c.Serving == 0 {
			continue
		}
		ns, _, _ := strings.Cut(c.Key, "/")
		n := index[ns]
		if n == nil {
			// The trailing slash orders namespaces as their callers' keys
			// order, so ties break the same way as over the callers.
			n = &tenant{namespace: ns, limit: limit, claim: division.Claim{Name: ns + "/"}, rateClaim: division.ClaimFloat{Name: ns + "/"}}
			index[ns] = n
			out = append(out, n)
		}
		n.callers = append(n.callers, i)
		n.stated += claims[i].Weight
		n.claim.Demand = addDemand(n.claim.Demand, claims[i].Demand)
		n.rateClaim.Demand += rateClaims[i].Demand
	}
	for _, n := range out {
		n.claim.Weight = min(n.stated, limit)
		n.rateClaim.Weight = n.claim.Weight
	}
	return out
}

// addDemand adds two demands, staying at division.Unbounded once there.
func addDemand(a, b int64) int64 {
	if a == division.Unbounded || b == division.Unbounded || a > division.Unbounded-b {
		return division.Unbounded
	}
	return a + b
}

func namespaceClaims(ns []*tenant) []division.Claim {
	out := make([]division.Claim, len(ns))
	for i, n := range ns {
		out[i] = n.claim
	}
	return out
}

func namespaceRateClaims(ns []*tenant) []division.ClaimFloat {
	out := make([]division.ClaimFloat, len(ns))
	for i, n := range ns {
		out[i] = n.rateClaim
	}
	return out
}

func (n *tenant) callerClaims(claims []division.Claim) []division.Claim {
	out := make([]division.Claim, len(n.callers))
	for k, i := range n.callers {
		out[k] = claims[i]
	}
	return out
}

func (n *tenant) callerRateClaims(claims []division.ClaimFloat) []division.ClaimFloat {
	out := make([]division.ClaimFloat, len(n.callers))
	for k, i := range n.callers {
		out[k] = claims[i]
	}
	return out
}

// alone reports whether the namespace holds one caller whose weight the
// cap left whole.
func (n *tenant) alone() bool { return n != nil && len(n.callers) == 1 && n.stated <= n.limit }

// reason says what the namespace got.
func (n *tenant) reason(usable, weights int64) string {
	w := fmt.Sprintf("weight %d of %d", n.claim.Weight, weights)
	if n.stated > n.limit {
		w = fmt.Sprintf("weight %d of %d (its quotas state %d, capped at the contract's maxWeightPerNamespace)", n.claim.Weight, weights, n.stated)
	}
	if n.claim.Demand != division.Unbounded && n.permits == n.claim.Demand {
		return fmt.Sprintf("namespace %s: its demand of %d in flight is met (%s)", n.namespace, n.claim.Demand, w)
	}
	return fmt.Sprintf("namespace %s: weighted max-min fair share of %d usable permits at %s: %d", n.namespace, usable, w, n.permits)
}

// callerReason says what the caller got of its namespace's part.
func (n *tenant) callerReason(cl division.Claim, permits int64) string {
	if cl.Demand != division.Unbounded && permits == cl.Demand {
		return fmt.Sprintf("this quota's demand of %d in flight is met (weight %d of %d in the namespace)", cl.Demand, cl.Weight, n.stated)
	}
	return fmt.Sprintf("this quota's share of %d at weight %d of %d in the namespace: %d", n.permits, cl.Weight, n.stated, permits)
}

// tenantOf returns the namespace that holds caller i, or nil for a caller
// without serving pods.
func tenantOf(ns []*tenant, i int) *tenant {
	for _, n := range ns {
		if slices.Contains(n.callers, i) {
			return n
		}
	}
	return nil
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
	case c.MaxWeightPerNamespace < 0 || c.MaxWeightPerNamespace > 1000:
		return field("maxWeightPerNamespace", "must be between 1 and 1000, got %d", c.MaxWeightPerNamespace)
	}
	return validateClusterShare(k, SharedContractField+".clusterShare")
}
