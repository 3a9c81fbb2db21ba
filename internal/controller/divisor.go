package controller

import (
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// chooseDivisor returns the replica count the contract is divided by and the
// fact that set it: the largest of the workload's spec replicas, the HPA's
// desired replicas (nil when there is no HPA) and the pods that still exist,
// and at least 1. A tie goes to the earlier fact in that order, so a steady
// workload reports WorkloadSpec; when every fact is zero (scaled to zero, no
// pods left) the divisor is 1 from WorkloadSpec.
//
// The maximum is what keeps the sum of shares within the contract during a
// transition: the spec (and then the HPA's desired count) rises before new
// pods start, and pods that are leaving still hold calls until they are gone.
func chooseDivisor(spec int32, hpaDesired *int32, existingPods int32) (int32, v1alpha1.DivisorSource) {
	divisor, source := max(spec, 1), v1alpha1.DivisorWorkloadSpec
	if d := ptr.Deref(hpaDesired, 0); d > divisor {
		divisor, source = d, v1alpha1.DivisorHPADesired
	}
	if existingPods > divisor {
		divisor, source = existingPods, v1alpha1.DivisorExistingPods
	}
	return divisor, source
}

// replicaStatus assembles status.replicas from the facts read.
func replicaStatus(w *workloadFacts, h *hpaFacts, existingPods int32) v1alpha1.ReplicaStatus {
	rs := v1alpha1.ReplicaStatus{Spec: w.specReplicas, Status: w.statusReplicas, ExistingPods: existingPods}
	if h != nil {
		if h.min != nil {
			rs.HPAMin = ptr.To(*h.min)
		}
		rs.HPAMax = ptr.To(h.max)
		rs.HPACurrent = ptr.To(h.current)
		rs.HPADesired = ptr.To(h.desired)
	}
	rs.Divisor, rs.DivisorSource = chooseDivisor(rs.Spec, rs.HPADesired, existingPods)
	return rs
}

// divisorSourceText names a divisor source for people, in event messages.
func divisorSourceText(s v1alpha1.DivisorSource) string {
	switch s {
	case v1alpha1.DivisorWorkloadSpec:
		return "workload spec replicas"
	case v1alpha1.DivisorHPADesired:
		return "HPA desired replicas"
	case v1alpha1.DivisorExistingPods:
		return "existing pods"
	}
	return string(s)
}
