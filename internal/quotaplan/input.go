package quotaplan

import (
	"errors"
	"fmt"

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
	"BelowOne":             "spec.belowOne",
	"MinReplicas":          MinReplicasField,
	"MaxReplicas":          MaxReplicasField,
}

// FieldError is a value no plan can be computed from.
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

// Input applies Default to spec, validates it and the divisor, and converts
// them to sizing's input. It checks the schema's rules on the fields the plan
// uses, so that a spec that did not pass through an API server (a file given
// to the CLI) gets the same answer; the first problem is returned as a
// *FieldError.
func Input(spec v1alpha1.DownstreamQuotaSpec, divisor int32) (sizing.Input, error) {
	spec = Default(spec)
	in := sizing.Input{
		Concurrency:   int(spec.Contract.Concurrency),
		RatePerSecond: float64(spec.Contract.RatePerSecond),
		Burst:         int(spec.Contract.Burst),
		SafetyPercent: int(spec.SafetyPercent),
		Divisor:       int(divisor),
		Latency:       spec.Latency.Typical.Duration,
		Deadline:      spec.Deadline.Duration,
		MaxRetries:    int(spec.Retry.MaxRetries),
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
	if spec.Demand != nil {
		in.DemandPerSecond = float64(spec.Demand.RatePerSecond)
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
	if err := validateSchemaRules(spec); err != nil {
		return sizing.Input{}, err
	}
	return in, nil
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
	if d := spec.Demand; d != nil && d.RatePerSecond < 1 {
		return &FieldError{Field: "spec.demand.ratePerSecond", Detail: fmt.Sprintf("must be at least 1, got %d", d.RatePerSecond)}
	}
	if r := spec.Retry.MaxRetries; r > MaxRetries {
		return &FieldError{Field: "spec.retry.maxRetries", Detail: fmt.Sprintf("must be at most %d, got %d", MaxRetries, r)}
	}
	return nil
}
