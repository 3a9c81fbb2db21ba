package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// +kubebuilder:rbac:groups=backpressure.dev,resources=downstreamcontracts,verbs=get;list;watch
// +kubebuilder:rbac:groups=backpressure.dev,resources=downstreamcontracts/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=list;watch

// DownstreamContractReconciler splits each DownstreamContract over the
// quotas that share it (its callers) and each caller's part over the
// caller's pods, in one handover over all of them, and publishes every
// caller's document and status. Build it with NewDownstreamContractReconciler.
type DownstreamContractReconciler struct {
	quotas *DownstreamQuotaReconciler
}

var _ reconcile.Reconciler = (*DownstreamContractReconciler)(nil)

// NewDownstreamContractReconciler returns a reconciler that reads, publishes
// and writes status as quotas does.
func NewDownstreamContractReconciler(quotas *DownstreamQuotaReconciler) *DownstreamContractReconciler {
	return &DownstreamContractReconciler{quotas: quotas}
}

// sharer is one quota sharing a contract, with what a reconcile read of it.
type sharer struct {
	quota   *v1alpha1.DownstreamQuota
	facts   facts
	members []member
	serving int64
	status  *v1alpha1.DownstreamQuotaStatus
	in      readiness
	plan    *quota.Sizing
}

// Reconcile splits one contract over its callers, steps the handover,
// records it, and publishes every caller's part.
func (r *DownstreamContractReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	q := r.quotas
	dc := &v1alpha1.DownstreamContract{}
	if err := q.client.Get(ctx, req.NamespacedName, dc); err != nil {
		// The callers' own reconciles report a contract that is gone.
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	sharers, err := r.sharers(ctx, dc)
	if err != nil {
		return reconcile.Result{}, err
	}

	over, err := q.oversubscription(ctx, dc.Spec.Downstream)
	if err != nil {
		return reconcile.Result{}, err
	}
	epoch := string(dc.UID)
	usable := quota.ContractUsable(dc.Spec)
	in := make([]quota.Caller, len(sharers))
	for i, s := range sharers {
		in[i] = quota.Caller{Key: s.quota.Namespace + "/" + s.quota.Name, Spec: s.quota.Spec, Serving: s.serving}
	}
	parts := quota.Split(dc.Spec, in)
	var callers []caller
	for i, s := range sharers {
		p, err := quota.SizePart(s.quota.Spec, dc.Spec, parts[i].Part, int32(max(s.serving, 1)))
		if err != nil {
			s.in.invalid = err
			continue
		}
		s.plan = &p
		callers = append(callers, caller{prefix: s.quota.Namespace + "/", total: usableTotal(p), members: s.members})
	}
	h := divide(callers, dc.Status.Division, epoch, dc.Spec.Handover, q.clock.Now())
	if h.changed {
		written, ok, err := recordDivision(ctx, q.client, dc, func(u *v1alpha1.DownstreamContract) { u.Status.Division = h.status })
		if err != nil || !ok {
			return reconcile.Result{RequeueAfter: staleRecheck}, err
		}
		dc = written
	}

	status := dc.Status.DeepCopy()
	status.ObservedGeneration, status.Usable, status.Division, status.Callers = dc.Generation, int32(usable), h.status, nil
	result := reconcile.Result{RequeueAfter: h.recheck}
	ci := 0
	for i, s := range sharers {
		part := parts[i]
		cs := v1alpha1.CallerStatus{
			Namespace: s.quota.Namespace, Quota: s.quota.Name,
			Workload: s.quota.Spec.WorkloadRef.Kind + "/" + s.quota.Spec.WorkloadRef.Name,
			Weight:   part.Weight, ReadyPods: int32(s.serving),
			Permits: int32(part.Part.Permits), RatePerSecond: quota.Quantity(part.Part.RatePerSecond), Reason: part.Reason,
		}
		if part.Demand != division.Unbounded {
			cs.Demand = ptr.To(int32(part.Demand))
		}
		status.Callers = append(status.Callers, cs)
		if s.plan == nil {
			if err := r.writeCaller(ctx, s); err != nil {
				return reconcile.Result{}, err
			}
			continue
		}
		res, err := r.publishCaller(ctx, dc, s, h, ci, over)
		ci++
		if err != nil {
			return reconcile.Result{}, err
		}
		if res.RequeueAfter > 0 && (result.RequeueAfter == 0 || res.RequeueAfter < result.RequeueAfter) {
			result.RequeueAfter = res.RequeueAfter
		}
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished,
		Message: fmt.Sprintf("%d usable permits split over %d callers", usable, len(sharers))}
	if len(sharers) == 0 {
		ready.Message = fmt.Sprintf("%d usable permits; no quota shares this contract yet", usable)
	}
	if over != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, over.Reason, over.Message
	}
	now := q.clock.Now()
	setCondition(&status.Conditions, ready, dc.Generation, now)
	setCondition(&status.Conditions, handedOverCondition(h), dc.Generation, now)
	if !equality.Semantic.DeepEqual(&dc.Status, status) {
		updated := dc.DeepCopy()
		updated.Status = *status
		if err := q.client.Status().Patch(ctx, updated, ctrl.MergeFrom(dc)); err != nil {
			return reconcile.Result{}, fmt.Errorf("controller: write status of contract %s: %w", dc.Name, ctrl.IgnoreNotFound(err))
		}
	}
	return result, nil
}

// sharers returns the quotas that share dc and whose namespace it admits,
// by namespace and name, with their facts read.
func (r *DownstreamContractReconciler) sharers(ctx context.Context, dc *v1alpha1.DownstreamContract) ([]*sharer, error) {
	var list v1alpha1.DownstreamQuotaList
	if err := r.quotas.client.List(ctx, &list, ctrl.MatchingFields{indexer.QuotaContractKey: dc.Name}); err != nil {
		return nil, fmt.Errorf("controller: list quotas of contract %s: %w", dc.Name, err)
	}
	var out []*sharer
	for i := range list.Items {
		qt := &list.Items[i]
		if !qt.DeletionTimestamp.IsZero() {
			continue
		}
		ok, err := contractAdmits(ctx, r.quotas.client, dc, qt.Namespace)
		if err != nil {
			return nil, err
		}
		if !ok {
			// Its namespace was turned away, perhaps by a label just
			// removed: the quota says so, and keeps its last plan.
			if err := r.quotas.reportContractMissing(ctx, qt, notAdmitted(dc.Name, qt.Namespace)); err != nil {
				return nil, err
			}
			continue
		}
		s := &sharer{quota: qt, status: qt.Status.DeepCopy()}
		s.status.ObservedGeneration = qt.Generation
		s.in = readiness{workload: qt.Spec.WorkloadRef, published: s.status.ConfigMap}
		f, err := r.quotas.observe(ctx, qt)
		if err != nil {
			return nil, err
		}
		s.facts = f
		if f.workload == nil {
			s.in.workloadMissing = true
		}
		s.members = membersOf(f.pods, qt.Name, string(dc.UID))
		for _, m := range s.members {
			if m.serving {
				s.serving++
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *sharer) int {
		return cmp.Or(cmp.Compare(a.quota.Namespace, b.quota.Namespace), cmp.Compare(a.quota.Name, b.quota.Name))
	})
	return out, nil
}

// contractAdmits reports whether dc's namespace selector admits namespace;
// no selector admits none (a contract names who may use it), {} every one.
func contractAdmits(ctx context.Context, c ctrl.Reader, dc *v1alpha1.DownstreamContract, namespace string) (bool, error) {
	if dc.Spec.NamespaceSelector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(dc.Spec.NamespaceSelector)
	if err != nil {
		return false, nil
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, ctrl.ObjectKey{Name: namespace}, &ns); err != nil {
		return false, ctrl.IgnoreNotFound(err)
	}
	return sel.Matches(labels.Set(ns.Labels)), nil
}

// publishCaller publishes caller i's part of the division to its ConfigMap
// and writes its quota's status, with the contract's finding over, if any.
func (r *DownstreamContractReconciler) publishCaller(ctx context.Context, dc *v1alpha1.DownstreamContract, s *sharer, h handoverStep, i int, over *v1alpha1.Diagnostic) (reconcile.Result, error) {
	q, qt := r.quotas, s.quota
	p := *s.plan
	// A caller whose workload does not exist has no replica status to read;
	// replicaStatus dereferences the workload, so it is only asked when there is one.
	replicas := v1alpha1.ReplicaStatus{DivisorSource: v1alpha1.DivisorReadyPods}
	if s.facts.workload != nil {
		replicas = replicaStatus(s.facts.workload, s.facts.hpa, s.facts.pods)
	}
	s.status.Replicas, s.in.replicas = &replicas, &replicas
	if s.facts.hpaMissing {
		s.in.missingHPA = qt.Spec.HPAName
	}
	s.status.PerPod, s.status.Demand, s.status.Diagnostics = &p.PerPod, p.Demand, p.Diagnostics
	s.in.permits, s.in.diagnostics = p.PerPod.Permits, p.Diagnostics
	callerView := h.forCaller(i, qt.Namespace+"/")
	s.status.Division = callerView.status
	s.in.handover = &callerView
	if over != nil {
		s.status.Diagnostics = append(slices.Clone(s.status.Diagnostics), *over)
		s.in.diagnostics = s.status.Diagnostics
	}

	doc := p.Document(qt.Name, dc.Spec.Downstream, qt.Generation, h.document(qt.Namespace+"/"))
	data, err := plan.Marshal(doc)
	if err != nil {
		s.in.invalid = err
		return reconcile.Result{}, r.writeCaller(ctx, s)
	}
	name := quota.ConfigMapName(qt)
	var result reconcile.Result
	if s.facts.workload != nil {
		target, conflict, err := q.target(ctx, qt, name)
		if err != nil {
			return reconcile.Result{}, err
		}
		if conflict != "" {
			s.in.conflict = conflict
			result.RequeueAfter = q.conflictRecheck
		} else {
			if err := q.publish(ctx, qt, target, doc.Hash, data); err != nil {
				return reconcile.Result{}, err
			}
			if err := q.withdraw(ctx, qt.Namespace, qt.Name, name); err != nil {
				return reconcile.Result{}, err
			}
			s.status.ConfigMap = &v1alpha1.PublishedConfigMap{Name: name, Key: plan.KeyFor(qt.Name), Hash: doc.Hash}
			s.in.published = s.status.ConfigMap
			s.status.Rollout = rolloutStatus(s.facts.pods, qt.Name, plan.AckFor(doc))
			s.in.applied = countApplied(s.facts.pods, qt.Name, plan.AckFor(doc))
			s.status.PodsApplied = s.in.applied.text()
		}
	}
	return result, r.writeCaller(ctx, s)
}

// writeCaller writes a caller quota's status with its conditions, and
// records a Warning event on the quota when its handover stalls.
func (r *DownstreamContractReconciler) writeCaller(ctx context.Context, s *sharer) error {
	prev, written, err := r.quotas.writeStatus(ctx, s.quota, s.status, s.in.conditions()...)
	if err != nil || !written {
		return err
	}
	r.quotas.warnOnFindings(s.quota, prev, s.status)
	r.quotas.warnOnChange(s.quota, prev, s.status, v1alpha1.ConditionHandedOver, v1alpha1.ReasonHandoverStalled)
	return nil
}

// contractMissing returns why q's contractRef gives q no part, or "" when
// the contract exists and admits q's namespace.
func (r *DownstreamQuotaReconciler) contractMissing(ctx context.Context, q *v1alpha1.DownstreamQuota) (string, error) {
	dc := &v1alpha1.DownstreamContract{}
	name := q.Spec.ContractRef.Name
	if err := r.client.Get(ctx, ctrl.ObjectKey{Name: name}, dc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("DownstreamContract %s not found; the workload gets its part once it exists", name), nil
		}
		return "", fmt.Errorf("controller: get contract %s: %w", name, err)
	}
	ok, err := contractAdmits(ctx, r.client, dc, q.Namespace)
	if err != nil {
		return "", err
	}
	if !ok {
		return notAdmitted(name, q.Namespace), nil
	}
	return "", nil
}

// notAdmitted says that contract's namespace selector turns namespace away.
func notAdmitted(contract, namespace string) string {
	return fmt.Sprintf("DownstreamContract %s does not admit namespace %s (its namespaceSelector does not match, or it has none and admits no namespace)", contract, namespace)
}

// reportContractMissing writes a shared quota's Ready condition when its
// contract is missing; its published plan, if any, stays.
func (r *DownstreamQuotaReconciler) reportContractMissing(ctx context.Context, q *v1alpha1.DownstreamQuota, why string) error {
	status := q.Status.DeepCopy()
	status.ObservedGeneration = q.Generation
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonContractNotFound, Message: why}
	if status.ConfigMap != nil {
		c.Message += fmt.Sprintf("; the last plan stays in ConfigMap %s", status.ConfigMap.Name)
	}
	if old := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); old != nil && old.Message == c.Message && old.Reason == c.Reason {
		return nil
	}
	_, _, err := r.writeStatus(ctx, q, status, c, planAppliedCondition(nil, c))
	return err
}
