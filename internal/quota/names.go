package quota

import (
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// Kind is the kind of a DownstreamQuota, as owner references name it.
const Kind = "DownstreamQuota"

// WorkloadKey names a workload of the apps group within a namespace:
// "<Kind>/<name>", such as "Deployment/search-gateway". The controller's
// indexes and the plugin both match quotas to workloads and HPAs by it.
func WorkloadKey(kind, name string) string { return kind + "/" + name }

// ConfigMapName returns the name of the ConfigMap q publishes to:
// spec.configMapName, or <workload>-backpressure when it is empty.
func ConfigMapName(q *v1alpha1.DownstreamQuota) string {
	if q.Spec.ConfigMapName != "" {
		return q.Spec.ConfigMapName
	}
	return q.Spec.WorkloadRef.Name + v1alpha1.ConfigMapSuffix
}

// HPATarget returns WorkloadKey of hpa's scaleTargetRef, and false when the
// target is not in the apps group.
func HPATarget(hpa *autoscalingv2.HorizontalPodAutoscaler) (string, bool) {
	ref := hpa.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName || ref.Name == "" {
		return "", false
	}
	return WorkloadKey(ref.Kind, ref.Name), true
}

// Gates returns the quotas whose gate cm holds, sorted and without
// duplicates: the quota of every key that plan.GateFromKey accepts, and every
// DownstreamQuota owner reference.
func Gates(cm *corev1.ConfigMap) []string {
	seen := make(map[string]struct{}, len(cm.Data)+len(cm.OwnerReferences))
	for key := range cm.Data {
		if gate, ok := plan.GateFromKey(key); ok {
			seen[gate] = struct{}{}
		}
	}
	for _, ref := range cm.OwnerReferences {
		if IsOwner(ref) {
			seen[ref.Name] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// IsOwner reports whether ref names a DownstreamQuota.
func IsOwner(ref metav1.OwnerReference) bool {
	return ref.Kind == Kind && ref.APIVersion == v1alpha1.GroupVersion.String()
}
