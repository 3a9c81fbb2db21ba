package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "downstreamquota"

// Setup registers the field indexes with mgr, and the DownstreamQuota and
// DownstreamContract controllers, both publishing through p. The manager's
// cache must be built with CacheOptions. It returns the reconcilers, for
// direct calls.
func Setup(ctx context.Context, mgr ctrl.Manager, p *Publisher, opts controller.Options) (*DownstreamQuotaReconciler, *DownstreamContractReconciler, error) {
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, nil, err
	}
	quotas, contracts := NewDownstreamQuotaReconciler(p), NewDownstreamContractReconciler(p)
	if err := quotas.SetupWithManager(mgr, opts); err != nil {
		return nil, nil, err
	}
	if err := contracts.SetupWithManager(mgr, opts); err != nil {
		return nil, nil, err
	}
	if err := mgr.Add(demandWatch{p: p}); err != nil {
		return nil, nil, fmt.Errorf("controller: add the demand watch: %w", err)
	}
	return quotas, contracts, nil
}

// SetupWithManager registers the DownstreamQuota controller with mgr; the
// field indexes must be registered (see Setup).
func (r *DownstreamQuotaReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	m := &mapper{client: r.pub.client, applied: &r.pub.applied, releases: &r.pub.releases}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(opts).
		For(&v1alpha1.DownstreamQuota{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarted, divisionLost, contractFoundAgain))).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(m.quotasForWorkload(kindDeployment)), builder.WithPredicates(workloadChanged)).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(m.quotasForWorkload(kindStatefulSet)), builder.WithPredicates(workloadChanged)).
		Watches(&autoscalingv2.HorizontalPodAutoscaler{}, handler.EnqueueRequestsFromMapFunc(m.quotasForHPA), builder.WithPredicates(hpaChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(m.quotasForPod), builder.WithPredicates(podChanged)).
		Watches(&corev1.ConfigMap{}, m.configMapHandler(nil)).
		Watches(&v1alpha1.DownstreamQuota{}, handler.EnqueueRequestsFromMapFunc(m.quotasOfDownstream), builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarted, publishingChanged))).
		Watches(&v1alpha1.DownstreamContract{}, handler.EnqueueRequestsFromMapFunc(m.quotasOfDownstream), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.pub.demand.wakeQuotas, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: set up %s: %w", ControllerName, err)
	}
	return nil
}

// SetupWithManager registers the DownstreamContract controller with mgr;
// the field indexes must be registered (see Setup). Besides the contract
// and the quotas naming it, it watches their workloads, pods and
// ConfigMaps, and the namespaces its selector may admit or turn away.
func (r *DownstreamContractReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	m := &mapper{client: r.pub.client, applied: &r.pub.applied, releases: &r.pub.releases}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ContractControllerName).
		WithOptions(opts).
		For(&v1alpha1.DownstreamContract{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, divisionLost))).
		Watches(&v1alpha1.DownstreamQuota{}, handler.EnqueueRequestsFromMapFunc(m.contractsOf), builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, deletionStarted))).
		Watches(&v1alpha1.DownstreamContract{}, handler.EnqueueRequestsFromMapFunc(m.contractsOf), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(m.contracts(m.quotasForWorkload(kindDeployment))), builder.WithPredicates(workloadChanged)).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(m.contracts(m.quotasForWorkload(kindStatefulSet))), builder.WithPredicates(workloadChanged)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(m.contracts(m.podsOfContracts)), builder.WithPredicates(podChanged)).
		Watches(&corev1.ConfigMap{}, m.configMapHandler(m.contractOfQuota)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(m.contractsSelectingNamespaces), builder.WithPredicates(labelsChanged)).
		WatchesRawSource(source.Channel(r.pub.demand.wakeContracts, &handler.EnqueueRequestForObject{})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: set up %s: %w", ContractControllerName, err)
	}
	return nil
}

// mapper maps events on the objects the controllers watch to the quotas
// and contracts they concern, through the cache and its field indexes.
type mapper struct {
	client client.Client
	// applied is the Publisher's memory of the gates it applied, so that
	// its own writes coming back wake nothing.
	applied *appliedGates
	// releases is the Publisher's memory of the releases of pods being
	// deleted, which every pod event the quotas see updates.
	releases *releases
}

// quotasOfDownstream maps a quota or a contract to the quotas, in every
// namespace, that name the same downstream: they check together that they
// do not hand out more than its contract. A contract maps also to the
// quotas that share it, which report when it is missing.
func (m *mapper) quotasOfDownstream(ctx context.Context, obj client.Object) []reconcile.Request {
	downstream, ok := downstreamOf(obj)
	if !ok {
		return nil
	}
	var shared []reconcile.Request
	if _, ok := obj.(*v1alpha1.DownstreamContract); ok {
		shared = m.quotasMatching(ctx, "", client.MatchingFields{indexer.QuotaContractKey: obj.GetName()})
	}
	var list v1alpha1.DownstreamQuotaList
	if err := m.client.List(ctx, &list, client.MatchingFields{indexer.QuotaDownstreamKey: downstream}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list quotas", "downstream", downstream)
		return shared
	}
	for i := range list.Items {
		if o := &list.Items[i]; o.Namespace != obj.GetNamespace() || o.Name != obj.GetName() {
			shared = append(shared, request(o.Namespace, o.Name))
		}
	}
	return shared
}

// downstreamOf returns the downstream a quota or a contract names, and
// false for any other object.
func downstreamOf(obj client.Object) (string, bool) {
	switch o := obj.(type) {
	case *v1alpha1.DownstreamQuota:
		return o.Spec.Downstream, true
	case *v1alpha1.DownstreamContract:
		return o.Spec.Downstream, true
	}
	return "", false
}

// ContractControllerName names the DownstreamContract controller in logs
// and metrics.
const ContractControllerName = "downstreamcontract"

// quotaContract maps a quota to the contract it shares, if any.
func quotaContract(_ context.Context, obj client.Object) []reconcile.Request {
	q, ok := obj.(*v1alpha1.DownstreamQuota)
	if !ok || q.Spec.ContractRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: q.Spec.ContractRef.Name}}}
}

// contractsOf maps a quota to the contract it shares, and a quota or a
// contract to the other contracts that name the same downstream, which
// check together with it that they do not hand out more than its contract.
func (m *mapper) contractsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	out := quotaContract(ctx, obj)
	downstream, _ := downstreamOf(obj)
	var list v1alpha1.DownstreamContractList
	if err := m.client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list contracts")
		return out
	}
	for i := range list.Items {
		c := &list.Items[i]
		req := reconcile.Request{NamespacedName: types.NamespacedName{Name: c.Name}}
		if c.Spec.Downstream == downstream && c.Name != obj.GetName() && !slices.Contains(out, req) {
			out = append(out, req)
		}
	}
	return out
}

// contractsSelectingNamespaces maps a namespace to the contracts whose
// namespaceSelector decides whether its quotas may share them: a new label
// may admit them, or turn them away.
func (m *mapper) contractsSelectingNamespaces(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.DownstreamContractList
	if err := m.client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list contracts")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.NamespaceSelector != nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].Name}})
		}
	}
	return out
}

// labelsChanged passes creations and deletions, and updates that change
// the object's labels.
var labelsChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool { return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) },
}

// contracts maps what quotas maps an object to onto the contracts those
// quotas share.
func (m *mapper) contracts(quotas handler.MapFunc) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, req := range quotas(ctx, obj) {
			for _, c := range m.contractOfQuota(ctx, req) {
				if !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
		return out
	}
}

// quotasMatching returns a request for each quota of namespace ("" for
// every namespace) that the field index selects.
func (m *mapper) quotasMatching(ctx context.Context, namespace string, fields client.MatchingFields) []reconcile.Request {
	var list v1alpha1.DownstreamQuotaList
	if err := m.client.List(ctx, &list, client.InNamespace(namespace), fields, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list quotas", "namespace", namespace, "fields", fields)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, request(list.Items[i].Namespace, list.Items[i].Name))
	}
	return reqs
}

// quotasForWorkload maps a Deployment or StatefulSet to the quotas naming
// it.
func (m *mapper) quotasForWorkload(kind string) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		return m.quotasMatching(ctx, obj.GetNamespace(), client.MatchingFields{indexer.QuotaWorkloadKey: quota.WorkloadKey(kind, obj.GetName())})
	}
}

// quotasForHPA maps an HPA to the quotas that name it and to the quotas of
// the workload it scales.
func (m *mapper) quotasForHPA(ctx context.Context, obj client.Object) []reconcile.Request {
	reqs := m.quotasMatching(ctx, obj.GetNamespace(), client.MatchingFields{indexer.QuotaHPAKey: obj.GetName()})
	if hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
		if target, ok := quota.HPATarget(hpa); ok {
			reqs = append(reqs, m.quotasMatching(ctx, obj.GetNamespace(), client.MatchingFields{indexer.QuotaWorkloadKey: target})...)
		}
	}
	return reqs
}

// quotasForPod maps a pod to the quotas that count it: those of the
// workload whose selector matches its labels, the match by which a
// reconcile counts pods.
//
// A pod event costs work in proportion to the quotas of the pod's workload,
// not to its namespace. A pod that a Deployment's ReplicaSet or a
// StatefulSet controls names its workload in its owner reference
// (podWorkload): one lookup in the quota index by workload key, which finds
// nothing in a namespace without quotas. A pod that another kind of
// controller owns (a Job, a DaemonSet) belongs to no workload a quota may
// name and costs nothing. Only a pod without a known controller (created
// alone, or by a ReplicaSet no Deployment made) is matched against the
// selectors of the workloads that the namespace's quotas name
// (quotasSelecting).
//
// The owner stands for the selector: a controller adopts only pods its
// selector matches and releases a pod whose labels stop matching, and an
// update maps both the old and the new pod. What the owner does not tell is
// a workload whose selector also matches another workload's pods, which
// Kubernetes warns against: its quotas count such a pod, but see its
// changes only at their next reconcile.
func (m *mapper) quotasForPod(ctx context.Context, obj client.Object) []reconcile.Request {
	m.releases.observe(obj)
	switch key, owner := podWorkload(obj); owner {
	case ownerWorkload:
		return m.quotasMatching(ctx, obj.GetNamespace(), client.MatchingFields{indexer.QuotaWorkloadKey: key})
	case ownerOther:
		return nil
	}
	return m.quotasSelecting(ctx, obj)
}

// quotasSelecting maps a pod to the quotas of its namespace whose workload's
// selector matches its labels, reading each workload a quota names once.
// A namespace without quotas costs one lookup of the quota cache.
func (m *mapper) quotasSelecting(ctx context.Context, obj client.Object) []reconcile.Request {
	ns := obj.GetNamespace()
	var quotas v1alpha1.DownstreamQuotaList
	if err := m.client.List(ctx, &quotas, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Failed to list quotas", "namespace", ns)
		return nil
	}
	if len(quotas.Items) == 0 {
		return nil
	}
	podLabels := labels.Set(obj.GetLabels())
	matches := map[v1alpha1.WorkloadReference]bool{}
	var reqs []reconcile.Request
	for i := range quotas.Items {
		q := &quotas.Items[i]
		ref := v1alpha1.WorkloadReference{Kind: q.Spec.WorkloadRef.Kind, Name: q.Spec.WorkloadRef.Name}
		match, seen := matches[ref]
		if !seen {
			match = m.workloadSelects(ctx, ns, ref, podLabels)
			matches[ref] = match
		}
		if !match && q.Spec.Reserve != nil {
			// The permit server's pods are members of the quota's
			// division too.
			broker := v1alpha1.WorkloadReference{Kind: kindDeployment, Name: q.Spec.Reserve.BrokerRef.Name}
			match, seen = matches[broker]
			if !seen {
				match = m.workloadSelects(ctx, ns, broker, podLabels)
				matches[broker] = match
			}
		}
		if match {
			reqs = append(reqs, request(q.Namespace, q.Name))
		}
	}
	return reqs
}

// workloadSelects reports whether the Deployment or StatefulSet ref of
// namespace exists and its selector matches podLabels. An empty selector
// matches nothing (apps/v1 rejects one anyway).
func (m *mapper) workloadSelects(ctx context.Context, ns string, ref v1alpha1.WorkloadReference, podLabels labels.Set) bool {
	key := client.ObjectKey{Namespace: ns, Name: ref.Name}
	var selector *metav1.LabelSelector
	switch ref.Kind {
	case kindDeployment:
		var d appsv1.Deployment
		if err := m.client.Get(ctx, key, &d); err != nil {
			return false
		}
		selector = d.Spec.Selector
	case kindStatefulSet:
		var s appsv1.StatefulSet
		if err := m.client.Get(ctx, key, &s); err != nil {
			return false
		}
		selector = s.Spec.Selector
	default:
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(selector)
	return err == nil && !s.Empty() && s.Matches(podLabels)
}

// configMapHandler maps events on the operator's ConfigMaps to quotas, or,
// through to, to what to maps a quota's request to (its contract). A
// created or deleted ConfigMap concerns every quota whose gate it holds or
// that publishes to it; an update concerns only the quotas whose key or
// owner reference changed, so that one quota's write does not wake every
// other quota of the workload, and of those not a quota whose gate is now
// what the Publisher itself just applied: that reconcile already wrote the
// status that goes with it, and another would only read it all again. A
// key someone else changed (a hand edit, a stale copy put back) is mapped,
// so the operator puts the document back.
func (m *mapper) configMapHandler(to func(context.Context, reconcile.Request) []reconcile.Request) handler.EventHandler {
	add := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request) {
		if to == nil {
			q.Add(req)
			return
		}
		for _, r := range to(ctx, req) {
			q.Add(r)
		}
	}
	all := func(ctx context.Context, obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		for _, gate := range quota.Gates(cm) {
			add(ctx, q, request(cm.Namespace, gate))
		}
		for _, req := range m.quotasMatching(ctx, cm.Namespace, client.MatchingFields{indexer.QuotaConfigMapKey: cm.Name}) {
			add(ctx, q, req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldCM, okOld := e.ObjectOld.(*corev1.ConfigMap)
			newCM, okNew := e.ObjectNew.(*corev1.ConfigMap)
			if !okOld || !okNew {
				return
			}
			if !maps.Equal(oldCM.Labels, newCM.Labels) {
				all(ctx, newCM, q)
				return
			}
			for _, gate := range changedGates(oldCM, newCM) {
				if !m.applied.ownGateWrite(newCM, gate) {
					add(ctx, q, request(newCM.Namespace, gate))
				}
			}
		},
	}
}

// contractOfQuota maps a quota's request to the contract it shares, if any.
func (m *mapper) contractOfQuota(ctx context.Context, req reconcile.Request) []reconcile.Request {
	q := &v1alpha1.DownstreamQuota{}
	if err := m.client.Get(ctx, req.NamespacedName, q); err != nil {
		return nil
	}
	return quotaContract(ctx, q)
}

// podsOfContracts maps a pod to the quotas that count it, and to the
// quotas whose gate it acknowledges: a pod relabelled out of its
// workload's selector still counts in a contract's record.
func (m *mapper) podsOfContracts(ctx context.Context, obj client.Object) []reconcile.Request {
	reqs := m.quotasForPod(ctx, obj)
	for k := range appliedAnnotations(obj) {
		req := request(obj.GetNamespace(), strings.TrimPrefix(k, v1alpha1.AppliedAnnotationPrefix))
		if !slices.Contains(reqs, req) {
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// changedGates returns the quotas whose key or owner reference differs
// between two versions of a ConfigMap.
func changedGates(oldCM, newCM *corev1.ConfigMap) []string {
	changed := map[string]struct{}{}
	for _, pair := range [][2]*corev1.ConfigMap{{oldCM, newCM}, {newCM, oldCM}} {
		a, b := pair[0], pair[1]
		for key, value := range a.Data {
			if other, ok := b.Data[key]; !ok || other != value {
				if gate, ok := plan.GateFromKey(key); ok {
					changed[gate] = struct{}{}
				}
			}
		}
		for _, ref := range a.OwnerReferences {
			if quota.IsOwner(ref) && !slices.Contains(b.OwnerReferences, ref) {
				changed[ref.Name] = struct{}{}
			}
		}
	}
	return slices.Sorted(maps.Keys(changed))
}

func request(namespace, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}

// deletionStarted passes a quota update that set its deletion timestamp.
var deletionStarted = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
	},
}

// divisionLost passes a quota's or a contract's update that removes its
// status.division (a status edit, a restore): the record is rebuilt and
// published again at once, above every revision seen, rather than at the
// next unrelated change.
var divisionLost = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return hasDivision(e.ObjectOld) && !hasDivision(e.ObjectNew)
	},
}

// hasDivision says whether obj, a quota or a contract, holds a division
// record.
func hasDivision(obj client.Object) bool {
	switch o := obj.(type) {
	case *v1alpha1.DownstreamQuota:
		return o.Status.Division != nil
	case *v1alpha1.DownstreamContract:
		return o.Status.Division != nil
	}
	return false
}

// contractFoundAgain passes a shared quota's update whose Ready condition
// leaves ContractNotFound. The contract's reconciler writes that status, and
// a step of it that began before the contract was deleted may write it after
// the quota reported the contract gone; nothing else would reconcile the
// quota again, and it would say Ready while its contract is gone. Its own
// reconcile checks the contract again: a contract that is back costs one
// reconcile that writes nothing.
var contractFoundAgain = quotaUpdate(func(o, n *v1alpha1.DownstreamQuota) bool {
	return n.Spec.ContractRef != nil && readyReason(o) == v1alpha1.ReasonContractNotFound && readyReason(n) != v1alpha1.ReasonContractNotFound
})

// quotaUpdate passes a quota's update for which pass(old, new) holds, and
// no create, delete or generic event.
func quotaUpdate(pass func(o, n *v1alpha1.DownstreamQuota) bool) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.DownstreamQuota)
			n, ok2 := e.ObjectNew.(*v1alpha1.DownstreamQuota)
			return ok1 && ok2 && pass(o, n)
		},
	}
}

// readyReason is the reason of q's Ready condition, or "" without one.
func readyReason(q *v1alpha1.DownstreamQuota) string {
	if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// publishingChanged passes a quota's update that starts or stops its
// publishing (status.configMap set or cleared): the other quotas of its
// downstream count it in their oversubscription check only while it
// publishes.
var publishingChanged = quotaUpdate(func(o, n *v1alpha1.DownstreamQuota) bool {
	return (o.Status.ConfigMap == nil) != (n.Status.ConfigMap == nil)
})

// workloadChanged passes workload updates that change a replica fact or the
// selector; a rollout's many status updates do not wake the quotas.
var workloadChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldSpec, oldStatus, oldSelector := workloadReplicaFacts(e.ObjectOld)
		newSpec, newStatus, newSelector := workloadReplicaFacts(e.ObjectNew)
		return !ptr.Equal(oldSpec, newSpec) || oldStatus != newStatus || !equality.Semantic.DeepEqual(oldSelector, newSelector)
	},
}

func workloadReplicaFacts(obj client.Object) (spec *int32, status int32, selector *metav1.LabelSelector) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return w.Spec.Replicas, w.Status.Replicas, w.Spec.Selector
	case *appsv1.StatefulSet:
		return w.Spec.Replicas, w.Status.Replicas, w.Spec.Selector
	}
	return nil, 0, nil
}

// hpaChanged passes HPA updates that change its target or a replica fact.
var hpaChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*autoscalingv2.HorizontalPodAutoscaler)
		n, okNew := e.ObjectNew.(*autoscalingv2.HorizontalPodAutoscaler)
		if !okOld || !okNew {
			return true
		}
		return o.Spec.ScaleTargetRef != n.Spec.ScaleTargetRef ||
			!ptr.Equal(o.Spec.MinReplicas, n.Spec.MinReplicas) || o.Spec.MaxReplicas != n.Spec.MaxReplicas ||
			o.Status.CurrentReplicas != n.Status.CurrentReplicas || o.Status.DesiredReplicas != n.Status.DesiredReplicas
	},
}

// podChanged passes pod updates that change what a quota sees of a pod:
// its labels (which workload it counts for), its deletion timestamp, its
// readiness or phase, or an acknowledgement annotation.
var podChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if !maps.Equal(o.GetLabels(), n.GetLabels()) || o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero() {
			return true
		}
		if op, ok := o.(*corev1.Pod); ok {
			if np, ok := n.(*corev1.Pod); ok && (podReady(op) != podReady(np) || op.Status.Phase != np.Status.Phase) {
				return true
			}
		}
		return !maps.EqualFunc(appliedAnnotations(o), appliedAnnotations(n), func(a, b string) bool { return a == b })
	},
}

// appliedAnnotations returns the acknowledgement annotations of obj.
func appliedAnnotations(obj client.Object) map[string]string {
	out := map[string]string{}
	for k, v := range obj.GetAnnotations() {
		if strings.HasPrefix(k, v1alpha1.AppliedAnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}
