// Package quotaplan computes a DownstreamQuota's per-pod plan. It is the one
// code path from the API to internal/sizing, shared by the controller and by
// kubectl-backpressure, so both show the same numbers for the same spec.
//
// It applies the defaults the API server would apply (for a spec read from a
// file), validates with errors that name the field path, calls sizing, and
// converts the result into the status types:
//
//	plan, err := quotaplan.Compute(quota.Spec, divisor)
//	if err != nil { ... } // a *FieldError, such as "spec.contract.concurrency: must be at least 1, got 0"
//	quota.Status.PerPod = &plan.PerPod
//	quota.Status.Demand = plan.Demand
//	quota.Status.Diagnostics = plan.Diagnostics
//
// Plan.Result keeps sizing's exact figures for consumers that want numbers
// rather than status strings (the published ConfigMap document, the CLI).
package quotaplan

import (
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// Plan is a quota's plan at one divisor, both as sizing computed it and in
// the status types of the API.
type Plan struct {
	// Input is what sizing was given: the defaulted spec and the divisor.
	Input sizing.Input
	// Result is sizing's plan, with exact figures.
	Result sizing.PlanResult
	// PerPod is Result's per-pod share for status.perPod.
	PerPod v1alpha1.PerPodPlan
	// Demand is Result's demand figures for status.demand; nil when the spec
	// has no demand.
	Demand *v1alpha1.DemandStatus
	// Diagnostics are Result's findings for status.diagnostics; nil when
	// there are none.
	Diagnostics []v1alpha1.Diagnostic
}

// Compute validates spec and divisor and computes the plan. Fields the API
// server defaults may be empty (see Default). Invalid input returns a
// *FieldError and no plan.
func Compute(spec v1alpha1.DownstreamQuotaSpec, divisor int32) (Plan, error) {
	in, err := Input(spec, divisor)
	if err != nil {
		return Plan{}, err
	}
	return compute(in)
}

// ComputePart is Compute for a quota whose workload shares contract: its
// part of the usable permits, rate, burst and retry budget is divided over
// divisor pods (see PartInput).
func ComputePart(spec v1alpha1.DownstreamQuotaSpec, contract v1alpha1.DownstreamContractSpec, part sizing.Part, divisor int32) (Plan, error) {
	in, err := PartInput(spec, contract, part, divisor)
	if err != nil {
		return Plan{}, err
	}
	return compute(in)
}

func compute(in sizing.Input) (Plan, error) {
	res, err := sizing.Plan(in)
	if err != nil {
		return Plan{}, fieldError(err)
	}
	return Plan{
		Input:       in,
		Result:      res,
		PerPod:      PerPodStatus(res.PerPod),
		Demand:      DemandStatus(res.Demand),
		Diagnostics: DiagnosticsStatus(res.Diagnostics),
	}, nil
}

// Sweep validates spec and computes its plan at every divisor from
// minReplicas to maxReplicas (at most sizing.MaxSweep of them), as an HPA
// may choose any. The returned input has Divisor minReplicas.
func Sweep(spec v1alpha1.DownstreamQuotaSpec, minReplicas, maxReplicas int32) (sizing.Input, sizing.SweepResult, error) {
	in, err := Input(spec, max(minReplicas, 1))
	if err != nil {
		return sizing.Input{}, sizing.SweepResult{}, err
	}
	res, err := sizing.Sweep(in, int(minReplicas), int(maxReplicas))
	if err != nil {
		return sizing.Input{}, sizing.SweepResult{}, fieldError(err)
	}
	in.Divisor = int(minReplicas)
	return in, res, nil
}
