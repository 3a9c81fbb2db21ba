package quota

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// MaxDuration is the longest duration the API accepts in a spec: the bound
// of the published plan's durations.
const MaxDuration = plan.MaxSeconds * time.Second

// Maximum is the API's bound on one count or rate of a spec.
type Maximum struct {
	// Path is the field's path, such as "spec.contract.concurrency".
	Path string
	// Max is the largest value the API accepts.
	Max int64

	// of reads the field from a quota's spec and its contract (its own, or
	// the shared one's); nil when the field is not a quota's.
	of func(v1alpha1.DownstreamQuotaSpec, v1alpha1.Contract) int64
}

// The bounds of the contract, a quota's or a DownstreamContract's.
var (
	maxConcurrency = Maximum{"spec.contract.concurrency", plan.MaxPermits,
		func(_ v1alpha1.DownstreamQuotaSpec, c v1alpha1.Contract) int64 { return int64(c.Concurrency) }}
	maxContractRate = Maximum{"spec.contract.ratePerSecond", plan.MaxPerSecond,
		func(_ v1alpha1.DownstreamQuotaSpec, c v1alpha1.Contract) int64 { return int64(c.RatePerSecond) }}
	maxContractBurst = Maximum{"spec.contract.burst", plan.MaxBurst,
		func(_ v1alpha1.DownstreamQuotaSpec, c v1alpha1.Contract) int64 { return int64(c.Burst) }}
	maxClusterConcurrency = Maximum{"spec.contract.clusterShare.concurrency", plan.MaxPermits,
		func(_ v1alpha1.DownstreamQuotaSpec, c v1alpha1.Contract) int64 {
			if c.ClusterShare == nil || c.ClusterShare.Concurrency == nil {
				return 0
			}
			return int64(*c.ClusterShare.Concurrency)
		}}
	maxClusterPercent = Maximum{"spec.contract.clusterShare.percent", 100, nil}
	maxSafety         = Maximum{"spec.safetyPercent", 100, nil}
)

// QuotaMaximums are the bounds of the DownstreamQuota spec's counts and
// rates: the +kubebuilder:validation:Maximum markers of api/v1alpha1, which
// a test holds to this table. Each count or rate a pod's share is derived
// from follows a bound of the published plan: one pod may be given the
// whole contract, so the contract's concurrency is bounded by what a pod's
// gate counts, and its rates by the plan's.
var QuotaMaximums = []Maximum{
	maxConcurrency, maxContractRate, maxContractBurst, maxClusterConcurrency, maxClusterPercent,
	{"spec.weight", 1000, nil},
	maxSafety,
	{"spec.demand.ratePerSecond", plan.MaxPerSecond, func(s v1alpha1.DownstreamQuotaSpec, _ v1alpha1.Contract) int64 {
		if s.Demand == nil {
			return 0
		}
		return int64(s.Demand.RatePerSecond)
	}},
	{"spec.demand.inFlight", plan.MaxPermits, func(s v1alpha1.DownstreamQuotaSpec, _ v1alpha1.Contract) int64 {
		if s.Demand == nil || s.Demand.InFlight == nil {
			return 0
		}
		return int64(*s.Demand.InFlight)
	}},
	{"spec.retry.maxRetries", MaxRetries, nil},
	{"spec.retry.budgetPerSecond", plan.MaxPerSecond, func(s v1alpha1.DownstreamQuotaSpec, _ v1alpha1.Contract) int64 {
		return int64(s.Retry.BudgetPerSecond)
	}},
}

// ContractMaximums are the same for the DownstreamContract spec.
var ContractMaximums = []Maximum{
	maxConcurrency, maxContractRate, maxContractBurst, maxClusterConcurrency, maxClusterPercent, maxSafety,
	{"spec.retryBudgetPerSecond", plan.MaxPerSecond, nil},
	// The most a namespace's quotas weigh together: as much as one quota.
	{"spec.maxWeightPerNamespace", 1000, nil},
}

// validateBounds checks a quota's spec and its contract against the
// maximums that sizing does not check itself (those with a reader) and
// its durations against MaxDuration, as the API server does, so that a
// spec read from a file gets its answer.
func validateBounds(spec v1alpha1.DownstreamQuotaSpec, contract v1alpha1.Contract) error {
	for _, m := range QuotaMaximums {
		if m.of == nil {
			continue
		}
		if v := m.of(spec, contract); v > m.Max {
			return &FieldError{Field: m.Path, Detail: fmt.Sprintf("must be at most %d, got %d", m.Max, v)}
		}
	}
	for _, d := range []struct {
		path string
		d    *metav1.Duration
	}{
		{"spec.latency.typical", &spec.Latency.Typical}, {"spec.latency.worst", spec.Latency.Worst},
		{"spec.deadline", &spec.Deadline}, {"spec.maxQueueWait", spec.MaxQueueWait},
		{"spec.acquireTimeout", spec.AcquireTimeout},
		{"spec.handover.unacknowledgedDelay", spec.Handover.UnacknowledgedDelay},
		{"spec.handover.stalledAfter", spec.Handover.StalledAfter},
	} {
		if d.d != nil && d.d.Duration > MaxDuration {
			return &FieldError{Field: d.path, Detail: fmt.Sprintf("must be at most %s, got %s", MaxDuration, d.d.Duration)}
		}
	}
	return nil
}
