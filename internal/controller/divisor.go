package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// replicaStatus assembles status.replicas from the facts read. The divisor
// is the number of serving pods (Ready, neither terminating nor finished):
// the exact division hands every usable permit to them, and the handover
// keeps the pods that are not yet or no longer serving within what they may
// hold. The workload's and the HPA's replica counts are reported for
// people; they no longer decide a share.
func replicaStatus(w *workloadFacts, h *hpaFacts, pods []corev1.Pod) v1alpha1.ReplicaStatus {
	rs := v1alpha1.ReplicaStatus{Spec: w.specReplicas, Status: w.statusReplicas, ExistingPods: int32(len(pods))}
	if h != nil {
		if h.min != nil {
			rs.HPAMin = ptr.To(*h.min)
		}
		rs.HPAMax = ptr.To(h.max)
		rs.HPACurrent = ptr.To(h.current)
		rs.HPADesired = ptr.To(h.desired)
	}
	for i := range pods {
		if podServing(&pods[i]) {
			rs.ReadyPods++
		}
	}
	rs.Divisor, rs.DivisorSource = rs.ReadyPods, v1alpha1.DivisorReadyPods
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
	case v1alpha1.DivisorReadyPods:
		return "Ready pods"
	}
	return string(s)
}
