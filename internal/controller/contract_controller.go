package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/handover"
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
	pub *Publisher
}

var _ reconcile.Reconciler = (*DownstreamContractReconciler)(nil)

// NewDownstreamContractReconciler returns a reconciler that divides,
// publishes and writes status through p.
func NewDownstreamContractReconciler(p *Publisher) *DownstreamContractReconciler {
	return &DownstreamContractReconciler{pub: p}
}

// sharer is one quota naming a contract, with what a reconcile read of it.
type sharer struct {
	quotaPart
	// serving counts its serving pods.
	serving int64
	// away is why the contract gives it no part while its pods may still
	// hold one: its namespace is not admitted (then the quota reports
	// ContractNotFound). Its pods are told 0.
	away string
	// part is its part of the split; nil when it takes none.
	part *quota.CallerPart
	// reserve is its spec.reserve, which comes out of its part; nil when
	// it asks for none.
	reserve *reserve
}

// Reconcile splits one contract over its callers, steps the handover,
// records it, and publishes every caller's part.
func (r *DownstreamContractReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p := r.pub
	dc := &v1alpha1.DownstreamContract{}
	if err := p.client.Get(ctx, req.NamespacedName, dc); err != nil {
		// The callers' own reconciles report a contract that is gone; the
		// demand watch no longer reads for it, also where a step that
		// began before the deletion registered a caller after they did.
		if apierrors.IsNotFound(err) {
			p.demand.unwatchWokenBy(req.Name)
		}
		return reconcile.Result{}, ctrl.IgnoreNotFound(err)
	}
	epoch := string(dc.UID)
	sharers, err := r.sharers(ctx, dc, epoch)
	if err != nil {
		return reconcile.Result{}, err
	}
	over, err := oversubscription(ctx, p.client, dc.Spec.Downstream, ctrl.ObjectKey{})
	if err != nil {
		return reconcile.Result{}, err
	}
	active := split(dc, sharers)
	d := &divisionInput{epoch: epoch, handover: dc.Spec.Handover, record: dc.Status.Division, shared: true}
	for _, s := range sharers {
		d.callers = append(d.callers, s.caller)
	}
	h, err := p.divide(ctx, d)
	if err != nil {
		return reconcile.Result{}, err
	}
	tooLarge := recordTooLarge(h.status)
	behind := false
	for i, s := range sharers {
		r.fill(s, dc, over)
		if err := p.prepare(ctx, &s.quotaPart, h.callers[i]); err != nil {
			return reconcile.Result{}, err
		}
		p.watchDemand(&s.quotaPart, &v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: dc.Name}})
		if s.part != nil || s.reserve == nil {
			s.reportReserve(s.reserve)
		}
		behind = behind || s.behind
		if s.in.tooLarge != "" && tooLarge == "" {
			tooLarge = fmt.Sprintf("the document of quota %s/%s does not fit: %s", s.quota.Namespace, s.quota.Name, s.in.tooLarge)
		}
	}
	if tooLarge != "" {
		return reconcile.Result{}, r.tooLarge(ctx, dc, sharers, tooLarge)
	}
	if behind {
		return reconcile.Result{RequeueAfter: staleRecheck}, nil
	}
	if h.changed {
		written, err := recordDivision(ctx, p.client, dc, func(u *v1alpha1.DownstreamContract) { u.Status.Division = h.status })
		if errors.Is(err, errStale) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		dc = written
		for _, s := range sharers {
			p.noteDemandMove(s.caller)
		}
	}

	result := reconcile.Result{RequeueAfter: h.recheck}
	for _, s := range sharers {
		if err := p.publishPart(ctx, &s.quotaPart); err != nil {
			return reconcile.Result{}, err
		}
		if s.in.conflict != "" {
			result.RequeueAfter = handover.Sooner(result.RequeueAfter, p.conflictRecheck)
		}
		err := r.writeCaller(ctx, s)
		if errors.Is(err, errStale) {
			result.RequeueAfter = handover.Sooner(result.RequeueAfter, staleRecheck)
			continue
		}
		if err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.writeContract(ctx, dc, r.contractStatus(dc, sharers, len(active), over, h)); err != nil {
		if errors.Is(err, errStale) {
			return reconcile.Result{RequeueAfter: staleRecheck}, nil
		}
		return reconcile.Result{}, err
	}
	return result, nil
}

// split splits dc's usable permits over the sharers it admits whose part
// can be computed, sizes each one's part, and returns them.
func split(dc *v1alpha1.DownstreamContract, sharers []*sharer) []*sharer {
	var (
		active []*sharer
		in     []quota.Caller
	)
	for _, s := range sharers {
		if s.away == "" && s.in.invalid == nil {
			active = append(active, s)
			in = append(in, quota.Caller{Key: s.quota.Namespace + "/" + s.quota.Name, Spec: s.quota.Spec, Serving: s.serving})
		}
	}
	for i, part := range quota.Split(dc.Spec, in) {
		s := active[i]
		s.part = &part
		pl, err := quota.SizePart(s.quota.Spec, dc.Spec, part.Part, int32(max(s.serving, 1)))
		if err != nil {
			s.in.invalid = err
			continue
		}
		s.plan = &pl
		if s.facts.workload != nil {
			s.caller.total = usableTotal(pl)
			if s.reserve != nil {
				s.reserve.size(s.caller, s.caller.total)
			}
		}
	}
	return active
}

// contractStatus returns dc's status after a division h over its sharers,
// active of which take a part.
func (r *DownstreamContractReconciler) contractStatus(dc *v1alpha1.DownstreamContract, sharers []*sharer, active int, over *v1alpha1.Diagnostic, h handoverStep) *v1alpha1.DownstreamContractStatus {
	usable := quota.ContractUsable(dc.Spec)
	status := dc.Status.DeepCopy()
	status.ObservedGeneration, status.Usable, status.Division = dc.Generation, int32(usable), h.status
	status.Callers, status.CallersNotListed = callerStatuses(sharers)
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished,
		Message: fmt.Sprintf("%d usable permits split over %d callers", usable, active)}
	if active == 0 {
		ready.Message = fmt.Sprintf("%d usable permits; no quota shares this contract yet", usable)
	}
	if over != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, over.Reason, over.Message
	}
	now := r.pub.clock.Now()
	setCondition(&status.Conditions, ready, dc.Generation, now)
	setCondition(&status.Conditions, h.condition(), dc.Generation, now)
	return status
}

// sharers returns every quota that names dc and is not being deleted, by
// namespace and name, with its facts read and what its pods read gathered:
// those of namespaces dc's selector turns away too, whose pods are told 0.
func (r *DownstreamContractReconciler) sharers(ctx context.Context, dc *v1alpha1.DownstreamContract, epoch string) ([]*sharer, error) {
	p := r.pub
	var list v1alpha1.DownstreamQuotaList
	if err := p.client.List(ctx, &list, ctrl.MatchingFields{indexer.QuotaContractKey: dc.Name}); err != nil {
		return nil, fmt.Errorf("controller: list quotas of contract %s: %w", dc.Name, err)
	}
	var out []*sharer
	for i := range list.Items {
		q := &list.Items[i]
		if !q.DeletionTimestamp.IsZero() {
			continue // its gate is withdrawn; the record counts its pods until they go
		}
		s := &sharer{quotaPart: quotaPart{quota: q, status: q.Status.DeepCopy(), downstream: dc.Spec.Downstream}}
		s.status.ObservedGeneration = q.Generation
		s.in = readiness{workload: q.Spec.WorkloadRef, published: s.status.ConfigMap}
		ok, err := contractAdmits(ctx, p.client, dc, q.Namespace)
		if err != nil {
			return nil, err
		}
		if !ok {
			// Its namespace was turned away, perhaps by a label just
			// removed: it says so, and its pods are told 0.
			s.away = notAdmitted(dc.Name, q.Namespace)
		}
		f, err := observe(ctx, p.client, q)
		var invalid *quota.FieldError
		switch {
		case errors.As(err, &invalid):
			s.in.invalid = invalid
		case err != nil:
			return nil, err
		}
		s.facts = f
		prefix := callerPrefix(q.Namespace, q.Name)
		s.caller = &caller{namespace: q.Namespace, gate: q.Name, prefix: prefix, generation: q.Generation}
		if f.workload == nil {
			s.in.workloadMissing = true
		} else {
			s.caller.members = membersOf(f.pods, prefix, q.Name, epoch)
			if s.away == "" && s.in.invalid == nil {
				s.own = quota.ConfigMapName(q)
			}
		}
		for _, m := range s.caller.members {
			if m.serving {
				s.serving++
			}
		}
		if f.workload != nil {
			// The permit server's pods join after the count: they hold
			// the reserve, not a share of the pods' part.
			if s.reserve, err = readReserve(ctx, p.client, q, f.pods); errors.As(err, &invalid) {
				s.in.invalid, s.reserve = invalid, nil
			} else if err != nil {
				return nil, err
			}
			if s.reserve != nil {
				s.reserve.join(s.caller, epoch, q.Status.Reserve)
			}
			p.shareDemand(ctx, &s.quotaPart)
		}
		if err := p.gather(ctx, &s.quotaPart, epoch, recordedRevision(dc.Status.Division, epoch), q.Status.Division); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *sharer) int {
		return cmp.Or(cmp.Compare(a.quota.Namespace, b.quota.Namespace), cmp.Compare(a.quota.Name, b.quota.Name))
	})
	return out, nil
}

// fill puts a caller's plan in its status and readiness, with the
// contract's finding over, if any.
func (r *DownstreamContractReconciler) fill(s *sharer, dc *v1alpha1.DownstreamContract, over *v1alpha1.Diagnostic) {
	if s.plan == nil {
		return
	}
	q, pl := s.quota, *s.plan
	// A caller whose workload does not exist has no replica status to read;
	// replicaStatus dereferences the workload, so it is only asked when there is one.
	replicas := v1alpha1.ReplicaStatus{DivisorSource: v1alpha1.DivisorReadyPods}
	if s.facts.workload != nil {
		replicas = replicaStatus(s.facts.workload, s.facts.hpa, s.facts.pods)
	}
	s.status.Replicas, s.in.replicas = &replicas, &replicas
	if s.facts.hpaMissing {
		s.in.missingHPA = q.Spec.HPAName
	}
	s.status.PerPod, s.status.Demand, s.status.Diagnostics = withoutReadyPods(pl, int32(s.serving))
	for _, d := range []*v1alpha1.Diagnostic{over, delayDiagnostic(dc.Spec.Handover, q.Spec.Deadline.Duration)} {
		if d != nil {
			s.status.Diagnostics = append(slices.Clone(s.status.Diagnostics), *d)
		}
	}
	s.in.permits, s.in.diagnostics = s.status.PerPod.Permits, s.status.Diagnostics
}

// writeCaller writes a caller quota's status with its conditions, and
// records the Warning events it calls for. A quota whose namespace the
// contract turns away reports ContractNotFound.
func (r *DownstreamContractReconciler) writeCaller(ctx context.Context, s *sharer) error {
	p := r.pub
	if s.away != "" {
		return p.reportContractMissing(ctx, s.quota, s.away)
	}
	prev, written, err := p.writeStatus(ctx, s.quota, s.status, s.in.conditions()...)
	if err != nil || !written {
		return err
	}
	p.announce(s.quota, prev, s.status, nil)
	return nil
}

// tooLarge reports a division that does not fit on the contract and on the
// callers whose document does not: nothing of the step is recorded or
// published.
func (r *DownstreamContractReconciler) tooLarge(ctx context.Context, dc *v1alpha1.DownstreamContract, sharers []*sharer, why string) error {
	p := r.pub
	for _, s := range sharers {
		if s.in.tooLarge == "" {
			continue
		}
		st := s.quota.Status.DeepCopy()
		st.ObservedGeneration = s.quota.Generation
		c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDivisionTooLarge,
			Message: s.in.tooLarge + "; nothing new is published, and the pods keep the last plan that was"}
		prev, written, err := p.writeStatus(ctx, s.quota, st, c)
		if err != nil {
			return ctrl.IgnoreNotFound(err)
		}
		if written {
			p.announce(s.quota, prev, st, nil)
		}
	}
	status := dc.Status.DeepCopy()
	status.ObservedGeneration = dc.Generation
	setCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDivisionTooLarge,
		Message: why + "; nothing new is published, and the pods keep the last plan that was"}, dc.Generation, p.clock.Now())
	return ctrl.IgnoreNotFound(r.writeContract(ctx, dc, status))
}

// writeContract writes status as dc's under dc's resourceVersion, when it
// differs; errStale when dc is no longer current, as its division record
// must then not be written.
func (r *DownstreamContractReconciler) writeContract(ctx context.Context, dc *v1alpha1.DownstreamContract, status *v1alpha1.DownstreamContractStatus) error {
	if equality.Semantic.DeepEqual(&dc.Status, status) {
		return nil
	}
	updated := dc.DeepCopy()
	updated.Status = *status
	err := r.pub.client.Status().Patch(ctx, updated, ctrl.MergeFromWithOptions(dc, ctrl.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		return errStale
	case apierrors.IsNotFound(err):
		// The contract was deleted while it was reconciled.
		return nil
	case err != nil:
		return fmt.Errorf("controller: write status of contract %s: %w", dc.Name, err)
	}
	return nil
}

// callerStatuses lists the callers' parts for the contract's status: the
// first MaxListedCallers, and how many more there are.
func callerStatuses(sharers []*sharer) ([]v1alpha1.CallerStatus, int32) {
	var out []v1alpha1.CallerStatus
	left := int32(0)
	for _, s := range sharers {
		if s.part == nil {
			continue
		}
		if len(out) == v1alpha1.MaxListedCallers {
			left++
			continue
		}
		part := s.part
		cs := v1alpha1.CallerStatus{
			Namespace: s.quota.Namespace, Quota: s.quota.Name,
			Workload: s.quota.Spec.WorkloadRef.Kind + "/" + s.quota.Spec.WorkloadRef.Name,
			Weight:   part.Weight, ReadyPods: int32(s.serving),
			Permits: int32(part.Part.Permits), RatePerSecond: quota.Quantity(part.Part.RatePerSecond), Reason: part.Reason,
		}
		if part.Demand != division.Unbounded {
			cs.Demand = ptr.To(int32(part.Demand))
		}
		out = append(out, cs)
	}
	return out, left
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

// contractMissing returns why q's contractRef gives q no part, or "" when
// the contract exists and admits q's namespace.
func contractMissing(ctx context.Context, c ctrl.Reader, q *v1alpha1.DownstreamQuota) (string, error) {
	dc := &v1alpha1.DownstreamContract{}
	name := q.Spec.ContractRef.Name
	if err := c.Get(ctx, ctrl.ObjectKey{Name: name}, dc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("DownstreamContract %s not found; the workload gets its part once it exists", name), nil
		}
		return "", fmt.Errorf("controller: get contract %s: %w", name, err)
	}
	ok, err := contractAdmits(ctx, c, dc, q.Namespace)
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
	return fmt.Sprintf("DownstreamContract %s does not admit namespace %s (its namespaceSelector does not match, or it has none and admits no namespace); its pods are told 0 permits", contract, namespace)
}

// reportContractMissing writes a shared quota's Ready condition when its
// contract is missing, or turns it away; errStale when q's division record
// changed since it was read.
func (p *Publisher) reportContractMissing(ctx context.Context, q *v1alpha1.DownstreamQuota, why string) error {
	// Its pods are told 0 or keep the last plan: their demand divides
	// nothing until the contract takes the quota again.
	p.demand.unwatch(types.NamespacedName{Namespace: q.Namespace, Name: q.Name})
	status := q.Status.DeepCopy()
	status.ObservedGeneration = q.Generation
	c := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonContractNotFound, Message: why}
	if status.ConfigMap != nil && !strings.Contains(why, "told 0") {
		c.Message += fmt.Sprintf("; the last plan stays in ConfigMap %s", status.ConfigMap.Name)
	}
	if old := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); old != nil && old.Message == c.Message && old.Reason == c.Reason {
		return nil
	}
	// errStale reaches the caller, which steps again soon: a contract step
	// that began before the contract went may have written the quota's
	// record meanwhile, and no event of that write reconciles it again.
	_, _, err := p.writeStatus(ctx, q, status, c, planAppliedCondition(nil, c))
	return err
}
