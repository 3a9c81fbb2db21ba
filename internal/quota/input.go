package quota

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// The defaults the API server applies to a DownstreamQuota (the
// +kubebuilder:default markers of api/v1alpha1).
const (
	// DefaultSafetyPercent is spec.safetyPercent when empty.
	DefaultSafetyPercent int32 = 80
	// DefaultBelowOne is spec.belowOne when empty.
	DefaultBelowOne = v1alpha1.BelowOneStrict
	// DefaultWorkloadAPIVersion is spec.workloadRef.apiVersion when empty.
	DefaultWorkloadAPIVersion = "apps/v1"
	// MaxRetries is the largest spec.retry.maxRetries the API accepts.
	MaxRetries = 10
)

// Field paths of the inputs, as they appear in errors.
const (
	// DivisorField names the divisor, which is not part of the spec.
	DivisorField = "divisor"
	// MinReplicasField names a sweep's lower bound.
	MinReplicasField = "minReplicas"
	// MaxReplicasField names a sweep's upper bound.
	MaxReplicasField = "maxReplicas"
	// SharedContractField prefixes the fields of a DownstreamContract's
	// contract in SizePart's errors.
	SharedContractField = "downstreamContract.spec.contract"
)

// fieldPaths maps sizing's input names to the spec's field paths.
var fieldPaths = map[string]string{
	"Concurrency":          "spec.contract.concurrency",
	"RatePerSecond":        "spec.contract.ratePerSecond",
	"Burst":                "spec.contract.burst",
	"SafetyPercent":        "spec.safetyPercent",
	"Divisor":              DivisorField,
	"Latency":              "spec.latency.typical",
	"WorstLatency":         "spec.latency.worst",
	"Deadline":             "spec.deadline",
	"MaxQueueWait":         "spec.maxQueueWait",
	"AcquireTimeout":       "spec.acquireTimeout",
	"DemandPerSecond":      "spec.demand.ratePerSecond",
	"MaxRetries":           "spec.retry.maxRetries",
	"RetryBudgetPerSecond": "spec.retry.budgetPerSecond",
	"ClusterConcurrency":   "spec.contract.clusterShare",
	// A shared contract caller's part, computed by the operator.
	"Part.Permits":              "part.permits",
	"Part.RatePerSecond":        "part.ratePerSecond",
	"Part.Burst":                "part.burst",
	"Part.RetryBudgetPerSecond": "part.retryBudgetPerSecond",
	"BelowOne":                  "spec.belowOne",
	"MinReplicas":               MinReplicasField,
	"MaxReplicas":               MaxReplicasField,
}

// FieldError is a value no sizing can be computed from.
type FieldError struct {
	// Field is the field path, such as "spec.contract.concurrency", or
	// DivisorField, MinReplicasField or MaxReplicasField.
	Field string
	// Detail says what is wrong, with the value given.
	Detail string
}

// Error returns "<field>: <detail>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// fieldError turns sizing's *InputError into a *FieldError naming the path.
func fieldError(err error) error {
	var ie *sizing.InputError
	if !errors.As(err, &ie) {
		return err
	}
	path, ok := fieldPaths[ie.Input]
	if !ok {
		path = ie.Input
	}
	return &FieldError{Field: path, Detail: ie.Problem}
}

// Default returns a copy of spec with the API server's defaults applied to
// empty fields: safetyPercent 80, belowOne Strict, workloadRef.apiVersion
// apps/v1. A spec read from the API server already has them.
func Default(spec v1alpha1.DownstreamQuotaSpec) v1alpha1.DownstreamQuotaSpec {
	out := *spec.DeepCopy()
	if out.SafetyPercent == 0 {
		out.SafetyPercent = DefaultSafetyPercent
	}
	if out.BelowOne == "" {
		out.BelowOne = DefaultBelowOne
	}
	if out.WorkloadRef.APIVersion == "" {
		out.WorkloadRef.APIVersion = DefaultWorkloadAPIVersion
	}
	return out
}

// specInput applies Default to spec, validates it and the divisor, and
// converts them to sizing's input. It checks the schema's rules on the
// fields sizing uses, so that a spec that did not pass through an API server (a file given
// to the CLI) gets the same answer; the first problem is returned as a
// *FieldError.
func specInput(spec v1alpha1.DownstreamQuotaSpec, divisor int32) (sizing.Input, error) {
	spec = Default(spec)
	if spec.Contract == nil {
		return sizing.Input{}, &FieldError{Field: "spec.contract", Detail: "required: a quota names its contract, or its workload's part of a shared one comes from spec.contractRef"}
	}
	if spec.ContractRef != nil {
		return sizing.Input{}, &FieldError{Field: "spec.contractRef", Detail: fmt.Sprintf("must not be given with spec.contract: exactly one of them, got contractRef %q", spec.ContractRef.Name)}
	}
	return input(spec, *spec.Contract, spec.SafetyPercent, nil, divisor)
}

// partInput is specInput for a quota whose workload shares the contract of a
// DownstreamContract: the contract, its safety percentage and the caller's
// part come from there; the latency, deadline, queue and retry settings
// from the quota.
func partInput(spec v1alpha1.DownstreamQuotaSpec, contract v1alpha1.DownstreamContractSpec, part sizing.Part, divisor int32) (sizing.Input, error) {
	spec = Default(spec)
	if spec.Contract != nil {
		return sizing.Input{}, &FieldError{Field: "spec.contract", Detail: "must not be given with a shared contract: the quota's part comes from its DownstreamContract"}
	}
	if err := validateClusterShare(contract.Contract, SharedContractField+".clusterShare"); err != nil {
		return sizing.Input{}, err
	}
	safety := contract.SafetyPercent
	if safety == 0 {
		safety = DefaultSafetyPercent
	}
	in, err := input(spec, contract.Contract, safety, &part, divisor)
	var fe *FieldError
	if errors.As(err, &fe) && (strings.HasPrefix(fe.Field, "spec.contract.") || fe.Field == "spec.safetyPercent") {
		// These come from the DownstreamContract, not from the quota.
		return sizing.Input{}, &FieldError{Field: "downstreamContract." + fe.Field, Detail: fe.Detail}
	}
	return in, err
}

// ClusterConcurrency returns the concurrency this cluster may use of c:
// clusterShare's count, or its percentage of the concurrency rounded down
// (at least 1), or all of it.
func ClusterConcurrency(c v1alpha1.Contract) int32 {
	switch cs := c.ClusterShare; {
	case cs == nil:
		return c.Concurrency
	case cs.Concurrency != nil:
		return min(*cs.Concurrency, c.Concurrency)
	case cs.Percent != nil:
		return max(1, int32(int64(c.Concurrency)*int64(*cs.Percent)/100))
	}
	return c.Concurrency
}

func input(spec v1alpha1.DownstreamQuotaSpec, contract v1alpha1.Contract, safety int32, part *sizing.Part, divisor int32) (sizing.Input, error) {
	in := sizing.Input{
		Concurrency:        int(contract.Concurrency),
		RatePerSecond:      float64(contract.RatePerSecond),
		Burst:              int(contract.Burst),
		ClusterConcurrency: int(ClusterConcurrency(contract)),
		Part:               part,
		SafetyPercent:      int(safety),
		Divisor:            int(divisor),
		Latency:            spec.Latency.Typical.Duration,
		Deadline:           spec.Deadline.Duration,
		MaxRetries:         int(spec.Retry.MaxRetries),
		// The budget is validated by sizing, negative included.
		RetryBudgetPerSecond: float64(spec.Retry.BudgetPerSecond),
	}
	if spec.Latency.Worst != nil {
		in.WorstLatency = spec.Latency.Worst.Duration
	}
	if spec.MaxQueueWait != nil {
		wait := spec.MaxQueueWait.Duration
		in.MaxQueueWait = &wait
	}
	if spec.AcquireTimeout != nil {
		timeout := spec.AcquireTimeout.Duration
		in.AcquireTimeout = &timeout
	}
	if d := spec.Demand; d != nil {
		in.DemandPerSecond = float64(d.RatePerSecond)
		if d.RatePerSecond == 0 && d.InFlight != nil && in.Latency > 0 {
			in.DemandPerSecond = rateForInFlight(*d.InFlight, in.Latency)
		}
	}
	switch spec.BelowOne {
	case v1alpha1.BelowOneStrict:
		in.BelowOne = sizing.Strict
	case v1alpha1.BelowOneAtLeastOne:
		in.BelowOne = sizing.AtLeastOne
	default:
		return sizing.Input{}, &FieldError{Field: "spec.belowOne", Detail: fmt.Sprintf("must be %s or %s, got %q", v1alpha1.BelowOneStrict, v1alpha1.BelowOneAtLeastOne, spec.BelowOne)}
	}
	if err := in.Validate(); err != nil {
		return sizing.Input{}, fieldError(err)
	}
	if err := validateBounds(spec, contract); err != nil {
		return sizing.Input{}, err
	}
	if err := validateSchemaRules(spec); err != nil {
		return sizing.Input{}, err
	}
	return in, nil
}

// rateForInFlight is Little's law backwards, λ = L / W, rounded down to a
// float64: sizing computes λ·W exactly and rounds once, so the demand's
// in-flight calls come back as L, never L plus a rounding error that the
// status's whole calls would round up to L+1.
func rateForInFlight(inFlight int32, latency time.Duration) float64 {
	exact := new(big.Rat).SetFrac(big.NewInt(int64(inFlight)*int64(time.Second)), big.NewInt(int64(latency)))
	f, _ := exact.Float64()
	if new(big.Rat).SetFloat64(f).Cmp(exact) > 0 {
		f = math.Nextafter(f, 0)
	}
	return f
}

// validateSchemaRules checks the rules of the API's schema that sizing does
// not need: where sizing reads a zero as "unknown" or accepts a wider range.
func validateSchemaRules(spec v1alpha1.DownstreamQuotaSpec) error {
	if w := spec.Latency.Worst; w != nil && w.Duration <= 0 {
		return &FieldError{Field: "spec.latency.worst", Detail: fmt.Sprintf("must be greater than 0, got %s", w.Duration)}
	}
	if w := spec.MaxQueueWait; w != nil && w.Duration >= spec.Deadline.Duration {
		return &FieldError{Field: "spec.maxQueueWait", Detail: fmt.Sprintf("must be less than deadline %s, got %s", spec.Deadline.Duration, w.Duration)}
	}
	if d := spec.Demand; d != nil {
		switch {
		case d.RatePerSecond == 0 && d.InFlight == nil:
			return &FieldError{Field: "spec.demand", Detail: "at least one of ratePerSecond and inFlight must be given"}
		case d.RatePerSecond < 0:
			return &FieldError{Field: "spec.demand.ratePerSecond", Detail: fmt.Sprintf("must be at least 1, got %d", d.RatePerSecond)}
		case d.InFlight != nil && *d.InFlight < 1:
			return &FieldError{Field: "spec.demand.inFlight", Detail: fmt.Sprintf("must be at least 1, got %d", *d.InFlight)}
		}
	}
	if c := spec.Contract; c != nil {
		if err := validateClusterShare(*c, "spec.contract.clusterShare"); err != nil {
			return err
		}
	}
	if r := spec.Retry.MaxRetries; r > MaxRetries {
		return &FieldError{Field: "spec.retry.maxRetries", Detail: fmt.Sprintf("must be at most %d, got %d", MaxRetries, r)}
	}
	return nil
}

// validateClusterShare checks c's clusterShare, at path.
func validateClusterShare(c v1alpha1.Contract, path string) error {
	cs := c.ClusterShare
	switch {
	case cs == nil:
		return nil
	case (cs.Concurrency == nil) == (cs.Percent == nil):
		return &FieldError{Field: path, Detail: "exactly one of concurrency and percent must be given"}
	case cs.Concurrency != nil && (*cs.Concurrency < 1 || *cs.Concurrency > c.Concurrency):
		return &FieldError{Field: path + ".concurrency", Detail: fmt.Sprintf("must be between 1 and the contract's concurrency %d, got %d", c.Concurrency, *cs.Concurrency)}
	case cs.Percent != nil && (*cs.Percent < 1 || *cs.Percent > 100):
		return &FieldError{Field: path + ".percent", Detail: fmt.Sprintf("must be between 1 and 100, got %d", *cs.Percent)}
	}
	return nil
}
