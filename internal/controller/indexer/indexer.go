// Package indexer holds the field indexes by which the DownstreamQuota
// controller maps events on workloads, HPAs and ConfigMaps back to the quotas
// they concern. The manager registers them with Setup; unit tests register
// the same functions on a fake client through Indexes, so a test exercises
// the production index functions.
package indexer

import (
	"context"
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// Index keys. They are field names of the cache's indexes, not JSON paths
// the API server understands; they are only valid with the manager's cache
// (or a fake client that registered Indexes).
const (
	// QuotaWorkloadKey indexes a DownstreamQuota by quota.WorkloadKey of
	// its spec.workloadRef and of the Deployment its
	// spec.reserve.brokerRef names: the workloads whose pods are members
	// of its division.
	QuotaWorkloadKey = "spec.workloadRef"
	// QuotaHPAKey indexes a DownstreamQuota by its spec.hpaName, when set.
	QuotaHPAKey = "spec.hpaName"
	// QuotaConfigMapKey indexes a DownstreamQuota by the name of the
	// ConfigMap it publishes to (quota.ConfigMapName).
	QuotaConfigMapKey = "configMapName"
	// HPATargetKey indexes an autoscaling/v2 HorizontalPodAutoscaler by
	// quota.WorkloadKey of its scaleTargetRef, when the target is in the
	// apps group.
	HPATargetKey = "spec.scaleTargetRef"
	// QuotaContractKey indexes DownstreamQuotas by the DownstreamContract
	// their spec.contractRef names.
	QuotaContractKey = "spec.contractRef"
	// QuotaDownstreamKey indexes DownstreamQuotas by spec.downstream, so
	// that quotas naming one downstream can be checked against each other.
	QuotaDownstreamKey = "spec.downstream"
	// ConfigMapGateKey indexes a ConfigMap by the quotas whose gate it
	// holds (quota.Gates): the quota names of its plan.KeyFor keys and of
	// its DownstreamQuota owner references.
	ConfigMapGateKey = "gates"
)

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
	keys := []string{quota.WorkloadKey(q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name)}
	if r := q.Spec.Reserve; r != nil && r.BrokerRef.Name != "" {
		// The permit server's Deployment and pods are members of the
		// quota's division too: their events concern it as its own
		// workload's do.
		keys = append(keys, quota.WorkloadKey("Deployment", r.BrokerRef.Name))
	}
	return keys
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
	return []string{quota.ConfigMapName(q)}
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
	if target, ok := quota.HPATarget(hpa); ok {
		return []string{target}
	}
	return nil
}

func configMapGates(obj client.Object) []string {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	return quota.Gates(cm)
}
