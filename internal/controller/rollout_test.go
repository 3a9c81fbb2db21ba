package controller

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func podMeta(name string, annotations map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

func TestRolloutStatus(t *testing.T) {
	const key = v1alpha1.AppliedAnnotationPrefix + "payments"
	many := make([]corev1.Pod, 0, 14)
	for i := 13; i >= 0; i-- { // reverse order: pending comes out sorted
		many = append(many, podMeta(fmt.Sprintf("api-%02d", i), nil))
	}
	tests := []struct {
		name string
		pods []corev1.Pod
		want *v1alpha1.RolloutStatus
	}{
		{name: "no pods", want: &v1alpha1.RolloutStatus{}},
		{
			name: "acknowledged, stale, other epoch, other quota, none, finished",
			pods: []corev1.Pod{
				podMeta("api-a", map[string]string{key: "uid-1/2"}),
				podMeta("api-b", map[string]string{key: "uid-1/1"}),
				podMeta("api-c", map[string]string{v1alpha1.AppliedAnnotationPrefix + "search": "uid-1/2"}),
				podMeta("api-d", nil),
				podMeta("api-e", map[string]string{key: "uid-1/2"}),
				podMeta("api-f", map[string]string{key: "uid-0/2"}),
				finished(podMeta("api-g", nil)),
			},
			want: &v1alpha1.RolloutStatus{Acknowledged: 2, Total: 6, Pending: []string{"api-b", "api-c", "api-d", "api-f"}},
		},
		{
			name: "all acknowledged",
			pods: []corev1.Pod{podMeta("api-a", map[string]string{key: "uid-1/2"})},
			want: &v1alpha1.RolloutStatus{Acknowledged: 1, Total: 1},
		},
		{
			name: "at most ten pending, by name",
			pods: many,
			want: &v1alpha1.RolloutStatus{Total: 14, Pending: []string{
				"api-00", "api-01", "api-02", "api-03", "api-04", "api-05", "api-06", "api-07", "api-08", "api-09",
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, rolloutStatus(tt.pods, "payments", plan.Ack{Epoch: "uid-1", Revision: 2})); diff != "" {
				t.Errorf("rolloutStatus (-want +got):\n%s", diff)
			}
		})
	}
}

func finished(p corev1.Pod) corev1.Pod {
	p.Status.Phase = corev1.PodFailed
	return p
}
