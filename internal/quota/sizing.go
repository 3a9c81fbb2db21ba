// Package quota holds the helpers over the DownstreamQuota and
// DownstreamContract API types, in the manner of kueue's pkg/workload: the
// API server's defaults (Default), the spec's bounds, the sizing of a
// quota's pods (Size, SizePart, Sweep), the split of a shared contract over
// its callers (Split), the published document (Sizing.Document), the
// conversions into status types, and the names a quota derives from its
// spec (WorkloadKey, HPATarget, ConfigMapName, Gates).
//
// Size is the one code path from the API to internal/sizing, shared by the
// controller and by kubectl-backpressure, so both show the same numbers for
// the same spec. It applies the defaults the API server would apply (for a
// spec read from a file), validates with errors that name the field path,
// calls sizing, and converts the result into the status types:
//
//	s, err := quota.Size(q.Spec, divisor)
//	if err != nil { ... } // a *FieldError, such as "spec.contract.concurrency: must be at least 1, got 0"
//	q.Status.PerPod = &s.PerPod
//	q.Status.Demand = s.Demand
//	q.Status.Diagnostics = s.Diagnostics
//
// Sizing.Result keeps sizing's exact figures for consumers that want numbers
// rather than status strings (the published ConfigMap document, the CLI).
package quota

import (
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// Sizing is a quota's sizing at one divisor, both as internal/sizing
// computed it and in the status types of the API.
type Sizing struct {
	// Input is what sizing was given: the defaulted spec and the divisor.
	Input sizing.Input
	// Result is sizing's result, with exact figures.
	Result sizing.Result
	// PerPod is Result's per-pod share for status.perPod.
	PerPod v1alpha1.PerPodPlan
	// Demand is Result's demand figures for status.demand; nil when the spec
	// has no demand.
	Demand *v1alpha1.DemandStatus
	// Diagnostics are Result's findings for status.diagnostics; nil when
	// there are none.
	Diagnostics []v1alpha1.Diagnostic
}

// Size validates spec and divisor and sizes the pods' shares. Fields the
// API server defaults may be empty (see Default). Invalid input returns a
// *FieldError and no sizing.
func Size(spec v1alpha1.DownstreamQuotaSpec, divisor int32) (Sizing, error) {
	in, err := specInput(spec, divisor)
	if err != nil {
		return Sizing{}, err
	}
	return size(in)
}

// SizePart is Size for a quota whose workload shares contract: its part
// of the usable permits, rate, burst and retry budget is divided over
// divisor pods. The contract, its safety percentage and the part come from
// the DownstreamContract; the latency, deadline, queue and retry settings
// from the quota.
func SizePart(spec v1alpha1.DownstreamQuotaSpec, contract v1alpha1.DownstreamContractSpec, part sizing.Part, divisor int32) (Sizing, error) {
	in, err := partInput(spec, contract, part, divisor)
	if err != nil {
		return Sizing{}, err
	}
	return size(in)
}

func size(in sizing.Input) (Sizing, error) {
	res, err := sizing.Size(in)
	if err != nil {
		return Sizing{}, fieldError(err)
	}
	return Sizing{
		Input:       in,
		Result:      res,
		PerPod:      perPodStatus(res.PerPod),
		Demand:      demandStatus(res.Demand),
		Diagnostics: diagnosticsStatus(res.Diagnostics),
	}, nil
}

// Sweep validates spec and sizes it at every divisor from
// minReplicas to maxReplicas (at most sizing.MaxSweep of them), as an HPA
// may choose any. The returned input has Divisor minReplicas.
func Sweep(spec v1alpha1.DownstreamQuotaSpec, minReplicas, maxReplicas int32) (sizing.Input, sizing.SweepResult, error) {
	in, err := specInput(spec, max(minReplicas, 1))
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
