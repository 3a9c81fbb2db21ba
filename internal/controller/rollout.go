package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// maxPending is the most pod names status.rollout.pending lists.
const maxPending = 10

// appliedAnnotation is the pod annotation by which the runtime acknowledges
// quota's plan.
func appliedAnnotation(quota string) string { return v1alpha1.AppliedAnnotationPrefix + quota }

// rolloutStatus counts the pods whose applied annotation for quota
// acknowledges current (its epoch and revision), and names the first
// maxPending others in name order. Every pod that has not finished counts,
// terminating ones included, as they still enforce a plan.
func rolloutStatus(pods []corev1.Pod, quota string, current plan.Ack) *v1alpha1.RolloutStatus {
	key := appliedAnnotation(quota)
	rs := &v1alpha1.RolloutStatus{}
	var pending []string
	for i := range pods {
		if podFinished(&pods[i]) {
			continue
		}
		rs.Total++
		if a, err := plan.ParseAck(pods[i].Annotations[key]); err == nil && a == current {
			rs.Acknowledged++
		} else {
			pending = append(pending, pods[i].Name)
		}
	}
	if len(pending) > 0 {
		slices.Sort(pending)
		rs.Pending = pending[:min(len(pending), maxPending)]
	}
	return rs
}
