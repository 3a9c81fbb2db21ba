package quota

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func TestConfigMapName(t *testing.T) {
	q := &v1alpha1.DownstreamQuota{Spec: v1alpha1.DownstreamQuotaSpec{WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "api"}}}
	if got := ConfigMapName(q); got != "api-backpressure" {
		t.Errorf("ConfigMapName without spec.configMapName = %q, want api-backpressure", got)
	}
	q.Spec.ConfigMapName = "gates"
	if got := ConfigMapName(q); got != "gates" {
		t.Errorf("ConfigMapName = %q, want gates", got)
	}
}

func TestHPATarget(t *testing.T) {
	hpa := func(apiVersion, kind, name string) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: apiVersion, Kind: kind, Name: name},
		}}
	}
	for _, tt := range []struct {
		hpa  *autoscalingv2.HorizontalPodAutoscaler
		want string
	}{
		{hpa("apps/v1", "Deployment", "api"), "Deployment/api"},
		{hpa("apps/v1", "StatefulSet", "db"), "StatefulSet/db"},
		{hpa("argoproj.io/v1alpha1", "Rollout", "api"), ""},
		{hpa("v1", "ReplicationController", "api"), ""},
		{hpa("a/b/c", "Deployment", "api"), ""},
		{hpa("apps/v1", "Deployment", ""), ""},
	} {
		ref := tt.hpa.Spec.ScaleTargetRef
		got, ok := HPATarget(tt.hpa)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("HPATarget(%s %s/%s) = %q, %v; want %q", ref.APIVersion, ref.Kind, ref.Name, got, ok, tt.want)
		}
	}
}

func TestGates(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: "deleted-but-owner"},
			{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: "payments"},
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "api"},
			{APIVersion: "other.dev/v1", Kind: "DownstreamQuota", Name: "lookalike"},
		}},
		Data: map[string]string{"payments.json": "{}", "search.json": "{}", "README": "x", "Bad_Name.json": "{}"},
	}
	if diff := cmp.Diff([]string{"deleted-but-owner", "payments", "search"}, Gates(cm)); diff != "" {
		t.Errorf("Gates (-want +got):\n%s", diff)
	}
}
