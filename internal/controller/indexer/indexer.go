// Package indexer holds the field indexes by which the DownstreamQuota
// controller maps events on workloads, HPAs and ConfigMaps back to the quotas
// they concern. The manager registers them with Setup; unit tests register
// the same functions on a fake client through Indexes, so a test exercises
// the production index functions.
package indexer

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// Index keys. They are field names of the cache's indexes, not JSON paths
// the API server understands; they are only valid with the manager's cache
// (or a fake client that registered Indexes).
const (
	// QuotaWorkloadKey indexes a DownstreamQuota by WorkloadKey of its
	// spec.workloadRef.
	QuotaWorkloadKey = "spec.workloadRef"
	// QuotaHPAKey indexes a DownstreamQuota by its spec.hpaName, when set.
	QuotaHPAKey = "spec.hpaName"
	// QuotaConfigMapKey indexes a DownstreamQuota by the name of the
	// ConfigMap it publishes to (ConfigMapName).
	QuotaConfigMapKey = "configMapName"
	// HPATargetKey indexes an autoscaling/v2 HorizontalPodAutoscaler by
	// WorkloadKey of its scaleTargetRef, when the target is in the apps
	// group.
	HPATargetKey = "spec.scaleTargetRef"
	// QuotaContractKey indexes DownstreamQuotas by the DownstreamContract
	// their spec.contractRef names.
	QuotaContractKey = "spec.contractRef"
	// QuotaDownstreamKey indexes DownstreamQuotas by spec.downstream, so
	// that quotas naming one downstream can be checked against each other.
	QuotaDownstreamKey = "spec.downstream"
	// ConfigMapGateKey indexes a ConfigMap by the quotas whose gate it
	// holds: the quota names of its plan.KeyFor keys and of its
	// DownstreamQuota owner references.
	ConfigMapGateKey = "gates"
)

// QuotaKind is the kind of a DownstreamQuota, as owner references name it.
const QuotaKind = "DownstreamQuota"

// WorkloadKey is the index value naming a workload of the apps group within
// a namespace: "<Kind>/<name>", such as "Deployment/search-gateway".
func WorkloadKey(kind, name string) string { return kind + "/" + name }

// ConfigMapName returns the name of the ConfigMap q publishes to:
// spec.configMapName, or <workload>-backpressure when it is empty.
func ConfigMapName(q *v1alpha1.DownstreamQuota) string {
	if q.Spec.ConfigMapName != "" {
		return q.Spec.ConfigMapName
	}
	return q.Spec.WorkloadRef.Name + v1alpha1.ConfigMapSuffix
}

// Index is one field index: the kind it applies to, its key and its
// function.
type Index struct {
	// Object is an instance of the indexed kind.
	Object client.Object
	// Field is the index key, one of the *Key constants.
	Field string
	// Extract returns the object's values for Field.
	Extract client.IndexerFunc
}

// Indexes returns every index the controller relies on.
func Indexes() []Index {
	return []Index{
		{Object: &v1alpha1.DownstreamQuota{}, Field: QuotaWorkloadKey, Extract: quotaWorkload},
		{Object: &v1alpha1.DownstreamQuota{}, Field: QuotaHPAKey, Extract: quotaHPA},
		{Object: &v1alpha1.DownstreamQuota{}, Field: QuotaConfigMapKey, Extract: quotaConfigMap},
		{Object: &v1alpha1.DownstreamQuota{}, Field: QuotaContractKey, Extract: quotaContract},
		{Object: &v1alpha1.DownstreamQuota{}, Field: QuotaDownstreamKey, Extract: quotaDownstream},
		{Object: &autoscalingv2.HorizontalPodAutoscaler{}, Field: HPATargetKey, Extract: hpaTarget},
		{Object: &corev1.ConfigMap{}, Field: ConfigMapGateKey, Extract: configMapGates},
	}
}

// Setup registers Indexes with the manager's field indexer. It must run
// before the manager starts.
func Setup(ctx context.Context, fi client.FieldIndexer) error {
	for _, ix := range Indexes() {
		if err := fi.IndexField(ctx, ix.Object, ix.Field, ix.Extract); err != nil {
			return fmt.Errorf("indexer: %T %s: %w", ix.Object, ix.Field, err)
		}
	}
	return nil
}

func quotaWorkload(obj client.Object) []string {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok || q.Spec.WorkloadRef.Name == "" {
		return nil
	}
	return []string{WorkloadKey(q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name)}
}

func quotaHPA(obj client.Object) []string {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok || q.Spec.HPAName == "" {
		return nil
	}
	return []string{q.Spec.HPAName}
}

func quotaConfigMap(obj client.Object) []string {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok {
		return nil
	}
	return []string{ConfigMapName(q)}
}

// quotaContract extracts the DownstreamContract a quota shares.
func quotaContract(obj client.Object) []string {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok || q.Spec.ContractRef == nil {
		return nil
	}
	return []string{q.Spec.ContractRef.Name}
}

// quotaDownstream extracts the downstream a quota names.
func quotaDownstream(obj client.Object) []string {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok || q.Spec.Downstream == "" {
		return nil
	}
	return []string{q.Spec.Downstream}
}

func hpaTarget(obj client.Object) []string {
	hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return nil
	}
	if target, ok := HPATarget(hpa); ok {
		return []string{target}
	}
	return nil
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
		if IsQuotaOwner(ref) {
			seen[ref.Name] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// IsQuotaOwner reports whether ref names a DownstreamQuota.
func IsQuotaOwner(ref metav1.OwnerReference) bool {
	return ref.Kind == QuotaKind && ref.APIVersion == v1alpha1.GroupVersion.String()
}

func configMapGates(obj client.Object) []string {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	return Gates(cm)
}
