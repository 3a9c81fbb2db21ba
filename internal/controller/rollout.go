package controller

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// maxPending is the most pod names status.rollout.pending lists.
const maxPending = 10

// appliedAnnotation is the pod annotation by which the runtime acknowledges
// quota's plan.
func appliedAnnotation(quota string) string { return v1alpha1.AppliedAnnotationPrefix + quota }

// rolloutStatus counts the pods whose applied annotation for quota carries
// hash, and names the first maxPending others in name order. Every existing
// pod counts, terminating ones included, as they still enforce a plan.
func rolloutStatus(pods []metav1.PartialObjectMetadata, quota, hash string) *v1alpha1.RolloutStatus {
	key := appliedAnnotation(quota)
	rs := &v1alpha1.RolloutStatus{Total: int32(len(pods))}
	var pending []string
	for i := range pods {
		if pods[i].Annotations[key] == hash {
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
