package builders

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// QuotaWrapper wraps a DownstreamQuota while a test builds it.
type QuotaWrapper struct{ v1alpha1.DownstreamQuota }

// MakeQuota returns a valid quota of a contract of its own, 10 in flight,
// over the Deployment named like it: a typical latency of 220 ms and a
// deadline of 2 s, the rest defaulted. Its downstream,
// <name>.<namespace>.example.com, is its own: quotas of one downstream that
// share no contract are checked against each other.
func MakeQuota(ns, name string) *QuotaWrapper {
	return &QuotaWrapper{v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			Downstream:  name + "." + ns + ".example.com",
			Contract:    &v1alpha1.Contract{Concurrency: 10},
			Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 220 * time.Millisecond}},
			Deadline:    metav1.Duration{Duration: 2 * time.Second},
		},
	}}
}

// DesignQuota returns the logistics quota of docs/concepts.md's search
// gateway: 50 in flight at 80%, 220ms typical latency, a 2s deadline, 100ms
// queue wait, 200ms acquire timeout, 1900 rps of demand, one retry and a
// retry budget of 10 per second, strict below one permit, generation 3, in
// namespace shop.
func DesignQuota() *QuotaWrapper {
	return MakeQuota("shop", "logistics-api").Generation(3).Workload("Deployment", "search-gateway").
		Downstream("logistics.example.com").Concurrency(50).Deadline(2*time.Second).
		Queue(100*time.Millisecond, 200*time.Millisecond).Safety(80).BelowOne(v1alpha1.BelowOneStrict).
		DemandRate(1900).Retry(1, 10)
}

// Generation sets metadata.generation.
func (w *QuotaWrapper) Generation(g int64) *QuotaWrapper {
	w.ObjectMeta.Generation = g
	return w
}

// UID sets metadata.uid, as the API server would.
func (w *QuotaWrapper) UID(uid string) *QuotaWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Workload sets the calling workload: a Deployment or a StatefulSet.
func (w *QuotaWrapper) Workload(kind, name string) *QuotaWrapper {
	w.Spec.WorkloadRef = v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: kind, Name: name}
	return w
}

// HPA sets spec.hpaName.
func (w *QuotaWrapper) HPA(name string) *QuotaWrapper {
	w.Spec.HPAName = name
	return w
}

// ConfigMap sets spec.configMapName.
func (w *QuotaWrapper) ConfigMap(name string) *QuotaWrapper {
	w.Spec.ConfigMapName = name
	return w
}

// Downstream sets spec.downstream.
func (w *QuotaWrapper) Downstream(name string) *QuotaWrapper {
	w.Spec.Downstream = name
	return w
}

// Concurrency gives the quota a contract of its own of n in flight.
func (w *QuotaWrapper) Concurrency(n int32) *QuotaWrapper {
	w.Spec.Contract, w.Spec.ContractRef = &v1alpha1.Contract{Concurrency: n}, nil
	return w
}

// ContractRef makes the quota share the DownstreamContract name instead of
// having a contract of its own, with its weight.
func (w *QuotaWrapper) ContractRef(name string, weight int32) *QuotaWrapper {
	w.Spec.Contract, w.Spec.SafetyPercent = nil, 0
	w.Spec.ContractRef, w.Spec.Weight = &v1alpha1.ContractReference{Name: name}, weight
	return w
}

// Latency sets the downstream's typical latency.
func (w *QuotaWrapper) Latency(d time.Duration) *QuotaWrapper {
	w.Spec.Latency.Typical = metav1.Duration{Duration: d}
	return w
}

// Deadline sets the per-hop deadline.
func (w *QuotaWrapper) Deadline(d time.Duration) *QuotaWrapper {
	w.Spec.Deadline = metav1.Duration{Duration: d}
	return w
}

// Queue sets the longest wait in the waiting room and the acquire timeout.
func (w *QuotaWrapper) Queue(maxWait, acquireTimeout time.Duration) *QuotaWrapper {
	w.Spec.MaxQueueWait = &metav1.Duration{Duration: maxWait}
	w.Spec.AcquireTimeout = &metav1.Duration{Duration: acquireTimeout}
	return w
}

// Safety sets spec.safetyPercent.
func (w *QuotaWrapper) Safety(percent int32) *QuotaWrapper {
	w.Spec.SafetyPercent = percent
	return w
}

// BelowOne sets the policy for a share below one permit.
func (w *QuotaWrapper) BelowOne(p v1alpha1.BelowOnePolicy) *QuotaWrapper {
	w.Spec.BelowOne = p
	return w
}

// DemandRate sets spec.demand.ratePerSecond.
func (w *QuotaWrapper) DemandRate(perSecond int32) *QuotaWrapper {
	if w.Spec.Demand == nil {
		w.Spec.Demand = &v1alpha1.Demand{}
	}
	w.Spec.Demand.RatePerSecond = perSecond
	return w
}

// DemandInFlight sets spec.demand.inFlight.
func (w *QuotaWrapper) DemandInFlight(n int32) *QuotaWrapper {
	if w.Spec.Demand == nil {
		w.Spec.Demand = &v1alpha1.Demand{}
	}
	w.Spec.Demand.InFlight = ptr.To(n)
	return w
}

// Retry sets the gateway's retries of one call and the workload's retry
// budget.
func (w *QuotaWrapper) Retry(maxRetries, budgetPerSecond int32) *QuotaWrapper {
	w.Spec.Retry = v1alpha1.RetryPolicy{MaxRetries: maxRetries, BudgetPerSecond: budgetPerSecond}
	return w
}

// Reserve sets spec.reserve: permits (a count, or a percentage such as
// "20%") lent by the permit server of the Deployment broker.
func (w *QuotaWrapper) Reserve(permits intstr.IntOrString, broker string) *QuotaWrapper {
	w.Spec.Reserve = &v1alpha1.Reserve{Permits: permits, BrokerRef: v1alpha1.BrokerReference{Name: broker}}
	return w
}

// Shares sets spec.shares: policy, and the metric read with policy Demand
// ("" for the default).
func (w *QuotaWrapper) Shares(policy v1alpha1.SharesPolicy, metric string) *QuotaWrapper {
	w.Spec.Shares = &v1alpha1.Shares{Policy: policy, Metric: metric}
	return w
}

// Obj returns the quota.
func (w *QuotaWrapper) Obj() *v1alpha1.DownstreamQuota { return w.DeepCopy() }

// ContractWrapper wraps a DownstreamContract while a test builds it.
type ContractWrapper struct{ v1alpha1.DownstreamContract }

// MakeContract returns a valid DownstreamContract of 50 in flight, the
// safety defaulted, for the downstream <name>.example.com.
func MakeContract(name string) *ContractWrapper {
	return &ContractWrapper{v1alpha1.DownstreamContract{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.DownstreamContractSpec{
			Downstream: name + ".example.com",
			Contract:   v1alpha1.Contract{Concurrency: 50},
		},
	}}
}

// Downstream sets spec.downstream.
func (w *ContractWrapper) Downstream(name string) *ContractWrapper {
	w.Spec.Downstream = name
	return w
}

// Concurrency sets the contract's in-flight limit.
func (w *ContractWrapper) Concurrency(n int32) *ContractWrapper {
	w.Spec.Contract.Concurrency = n
	return w
}

// Safety sets spec.safetyPercent.
func (w *ContractWrapper) Safety(percent int32) *ContractWrapper {
	w.Spec.SafetyPercent = percent
	return w
}

// Obj returns the contract.
func (w *ContractWrapper) Obj() *v1alpha1.DownstreamContract { return w.DeepCopy() }
