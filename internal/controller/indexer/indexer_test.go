package indexer

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func newQuota(kind, workload, hpa, configMap string) *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{Spec: v1alpha1.DownstreamQuotaSpec{
		WorkloadRef:   v1alpha1.WorkloadReference{Kind: kind, Name: workload},
		HPAName:       hpa,
		ConfigMapName: configMap,
	}}
}

func extract(t *testing.T, field string, obj client.Object) []string {
	t.Helper()
	for _, ix := range Indexes() {
		if ix.Field == field {
			return ix.Extract(obj)
		}
	}
	t.Fatalf("no index %q", field)
	return nil
}

func TestQuotaIndexes(t *testing.T) {
	q := newQuota("Deployment", "api", "", "")
	if diff := cmp.Diff([]string{"Deployment/api"}, extract(t, QuotaWorkloadKey, q)); diff != "" {
		t.Errorf("workload (-want +got):\n%s", diff)
	}
	if got := extract(t, QuotaHPAKey, q); got != nil {
		t.Errorf("hpa of a quota naming none = %v", got)
	}
	if diff := cmp.Diff([]string{"api-backpressure"}, extract(t, QuotaConfigMapKey, q)); diff != "" {
		t.Errorf("default ConfigMap (-want +got):\n%s", diff)
	}

	q = newQuota("StatefulSet", "ledger", "ledger-hpa", "gates")
	if diff := cmp.Diff([]string{"StatefulSet/ledger"}, extract(t, QuotaWorkloadKey, q)); diff != "" {
		t.Errorf("workload (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ledger-hpa"}, extract(t, QuotaHPAKey, q)); diff != "" {
		t.Errorf("hpa (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"gates"}, extract(t, QuotaConfigMapKey, q)); diff != "" {
		t.Errorf("named ConfigMap (-want +got):\n%s", diff)
	}
	if got := extract(t, QuotaWorkloadKey, &corev1.ConfigMap{}); got != nil {
		t.Errorf("a ConfigMap in the quota index: %v", got)
	}
}

func TestHPATarget(t *testing.T) {
	hpa := func(apiVersion, kind, name string) *autoscalingv2.HorizontalPodAutoscaler {
		return &autoscalingv2.HorizontalPodAutoscaler{Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: apiVersion, Kind: kind, Name: name},
		}}
	}
	tests := []struct {
		name string
		hpa  *autoscalingv2.HorizontalPodAutoscaler
		want []string
	}{
		{name: "Deployment", hpa: hpa("apps/v1", "Deployment", "api"), want: []string{"Deployment/api"}},
		{name: "StatefulSet", hpa: hpa("apps/v1", "StatefulSet", "db"), want: []string{"StatefulSet/db"}},
		{name: "another group", hpa: hpa("argoproj.io/v1alpha1", "Rollout", "api")},
		{name: "core group", hpa: hpa("v1", "ReplicationController", "api")},
		{name: "malformed apiVersion", hpa: hpa("a/b/c", "Deployment", "api")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, extract(t, HPATargetKey, tt.hpa)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestGateIndex(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: "payments"},
		}},
		Data: map[string]string{"search.json": "{}", "README": "x"},
	}
	if diff := cmp.Diff([]string{"payments", "search"}, extract(t, ConfigMapGateKey, cm)); diff != "" {
		t.Errorf("gate index (-want +got):\n%s", diff)
	}
	if got := extract(t, ConfigMapGateKey, &v1alpha1.DownstreamQuota{}); got != nil {
		t.Errorf("a quota in the gate index: %v", got)
	}
}
