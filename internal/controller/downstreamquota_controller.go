package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// DefaultConflictRecheck is how often a quota whose ConfigMap name is taken
// by a ConfigMap the operator does not own checks again. The foreign
// ConfigMap is outside the operator's label-filtered cache, so its removal
// raises no event.
const DefaultConflictRecheck = time.Minute

// DefaultMaxConcurrentReconciles is how many quotas the operator reconciles
// at once by default: cmd/manager's --max-concurrent-reconciles, which the
// perf tests start with. A reconcile waits mostly on its API writes, but
// more workers do not make the API server answer more of them: under pod
// churn (make perf's TestChurn, 50 events a second on the shared two-core
// machine) 16 workers took 656 ms a reconcile and got through 29 a second,
// where 4 took 100 ms and got through 46.
const DefaultMaxConcurrentReconciles = 4

// Workloads, HPAs and pods are read from the cache only (list and watch);
// quotas and ConfigMaps are also read from the API server (get) when the
// cache may be stale or does not hold the object.
// +kubebuilder:rbac:groups=backpressure.dev,resources=downstreamquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=backpressure.dev,resources=downstreamquotas/status,verbs=patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// DownstreamQuotaReconciler divides each DownstreamQuota's contract over its
// workload's pods and publishes the shares; see the package documentation.
// A quota that shares a DownstreamContract is divided and published by the
// DownstreamContractReconciler. Build it with NewDownstreamQuotaReconciler.
type DownstreamQuotaReconciler struct {
	pub *Publisher
}

var _ reconcile.Reconciler = (*DownstreamQuotaReconciler)(nil)

// NewDownstreamQuotaReconciler returns a reconciler that divides, publishes
// and writes status through p.
func NewDownstreamQuotaReconciler(p *Publisher) *DownstreamQuotaReconciler {
	return &DownstreamQuotaReconciler{pub: p}
}

// Reconcile brings one quota's published gate and status up to date, or
// withdraws its gate when the quota is gone.
func (r *DownstreamQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := r.pub
	q := &v1alpha1.DownstreamQuota{}
	if err := p.client.Get(ctx, req.NamespacedName, q); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("controller: get quota %s: %w", req.NamespacedName, err)
		}
		p.applied.forget(req.NamespacedName)
		p.demand.forget(req.NamespacedName)
		return ctrl.Result{}, p.withdraw(ctx, req.Namespace, req.Name, "")
	}
	if !q.DeletionTimestamp.IsZero() {
		// Another finalizer keeps the quota for now; its pods' gate goes.
		return ctrl.Result{}, p.withdraw(ctx, q.Namespace, q.Name, "")
	}
	if q.Spec.ContractRef != nil {
		// The contract's reconciler divides, publishes and writes the
		// status of the quotas that share it; this one only says when
		// there is no contract to share.
		why, err := contractMissing(ctx, p.client, q)
		if err != nil || why == "" {
			return ctrl.Result{}, err
		}
		err = p.reportContractMissing(ctx, q, why)
		if errors.Is(err, errStale) {
			// A contract step wrote the quota's record since it was read.
			return ctrl.Result{RequeueAfter: staleRecheck}, nil
		}
		return ctrl.Result{}, err
	}

	part := &quotaPart{quota: q, status: q.Status.DeepCopy(), downstream: q.Spec.Downstream}
	part.status.ObservedGeneration = q.Generation
	part.in = readiness{workload: q.Spec.WorkloadRef, published: part.status.ConfigMap}
	var (
		result  ctrl.Result
		change  *planChange
		written *v1alpha1.DownstreamQuotaStatus
	)
	f, err := observe(ctx, p.client, q)
	var invalid *quota.FieldError
	switch {
	case errors.As(err, &invalid):
		part.in.invalid = invalid
	case err != nil:
		return ctrl.Result{}, err
	case f.workload == nil:
		part.in.workloadMissing = true
	default:
		part.facts = f
		result.RequeueAfter, change, written, err = r.divide(ctx, part)
		if errors.Is(err, errStale) {
			// The step was computed from an old record: nothing of it
			// may be written, not even through the status write's retry.
			return ctrl.Result{RequeueAfter: staleRecheck}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}

	// Every reconcile that got this far says whether the demand watch
	// reads the quota: not once its workload is gone, it is invalid or it
	// no longer follows demand.
	p.watchDemand(part, &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: q.Namespace, Name: q.Name}})
	prev := written
	if prev == nil || part.statusPending {
		was, ok, err := p.writeStatus(ctx, q, part.status, part.in.conditions()...)
		if errors.Is(err, errStale) {
			return ctrl.Result{RequeueAfter: staleRecheck}, nil
		}
		if err != nil || (!ok && prev == nil) {
			return result, err
		}
		if prev == nil {
			prev = was
		}
	}
	// Events follow a status write, judged against the status the API
	// server had, so a reconcile that read a stale cache reports nothing
	// twice.
	p.announce(q, prev, part.status, change)
	return result, nil
}

// divide computes the quota's plan from its facts, runs one step of its own
// division, records it ahead, publishes it and fills the status and the
// readiness in. It returns when to step again, the change of the
// published plan's arithmetic, if any, for an event, and, when the status
// was written ahead with the record, the status it replaced.
func (r *DownstreamQuotaReconciler) divide(ctx context.Context, part *quotaPart) (time.Duration, *planChange, *v1alpha1.DownstreamQuotaStatus, error) {
	p, q, f, status, in := r.pub, part.quota, part.facts, part.status, &part.in
	replicas := replicaStatus(f.workload, f.hpa, f.pods)
	status.Replicas, in.replicas = &replicas, &replicas
	if f.hpaMissing {
		in.missingHPA = q.Spec.HPAName
	}
	pl, err := quota.Size(q.Spec, max(replicas.Divisor, 1))
	if err != nil {
		in.invalid = err
		return 0, nil, nil, nil
	}
	status.PerPod, status.Demand, status.Diagnostics = withoutReadyPods(pl, replicas.Divisor)
	over, err := oversubscription(ctx, p.client, q.Spec.Downstream, types.NamespacedName{Namespace: q.Namespace, Name: q.Name})
	if err != nil {
		return 0, nil, nil, err
	}
	for _, d := range []*v1alpha1.Diagnostic{over, delayDiagnostic(q.Spec.Handover, q.Spec.Deadline.Duration)} {
		if d != nil {
			status.Diagnostics = append(slices.Clone(status.Diagnostics), *d)
		}
	}
	in.permits, in.diagnostics = status.PerPod.Permits, status.Diagnostics
	part.plan = &pl

	epoch := string(q.UID)
	part.own = quota.ConfigMapName(q)
	part.caller = &caller{namespace: q.Namespace, gate: q.Name, generation: q.Generation, total: usableTotal(pl), members: membersOf(f.pods, "", q.Name, epoch)}
	rsv, err := readReserve(ctx, p.client, q, f.pods)
	if err != nil {
		var invalid *quota.FieldError
		if errors.As(err, &invalid) {
			in.invalid = invalid
			return 0, nil, nil, nil
		}
		return 0, nil, nil, err
	}
	if rsv != nil {
		rsv.size(part.caller, part.caller.total)
		rsv.join(part.caller, epoch, q.Status.Reserve)
	}
	p.shareDemand(ctx, part)
	if err := p.gather(ctx, part, epoch, recordedRevision(q.Status.Division, epoch), q.Status.Division); err != nil {
		return 0, nil, nil, err
	}
	d := &divisionInput{epoch: epoch, handover: q.Spec.Handover, record: q.Status.Division, callers: []*caller{part.caller}}
	h, err := p.divide(ctx, d)
	if err != nil {
		return 0, nil, nil, err
	}
	if err := p.prepare(ctx, part, h.callers[0]); err != nil {
		return 0, nil, nil, err
	}
	if why := recordTooLarge(h.status); why != "" {
		in.tooLarge = why
	}
	if in.tooLarge != "" {
		// Nothing of the step is recorded or published: the status keeps
		// the division the pods were last told.
		status.Division, status.ConfigMap, status.Rollout, status.PodsApplied = q.Status.Division, q.Status.ConfigMap, q.Status.Rollout, q.Status.PodsApplied
		status.PodPermits = q.Status.PodPermits
		in.handover, in.published, in.applied = nil, q.Status.ConfigMap, nil
		return 0, nil, nil, nil
	}
	if part.behind {
		return 0, nil, nil, errStale
	}
	part.reportReserve(rsv)
	var written *v1alpha1.DownstreamQuotaStatus
	if h.changed {
		// Write ahead: what every pod is told and may still hold is on
		// record before any pod is told it, so that neither a restart nor
		// a stale cache can forget capacity a pod may hold. The whole
		// status goes in the same write, as it stands once the document
		// is published, rather than in a second write after it: one write
		// fewer on every change of the division. Should the publication
		// then fail, the reconcile fails and its retry publishes.
		//
		// Except where the gate's ConfigMap holds no document of it yet:
		// a status that said the plan was published (Ready, configMap)
		// before it is would send a user who waited for Ready to a
		// ConfigMap without the key. The record goes ahead alone then,
		// and the rest follows the publication in a second write.
		before := q.Status.DeepCopy()
		ahead, conds := status, in.conditions()
		if part.firstPublication() {
			ahead = q.Status.DeepCopy()
			ahead.Division = status.Division
			conds = nil
		}
		if err := p.recordStatus(ctx, q, ahead, conds...); err != nil {
			return 0, nil, nil, err
		}
		p.noteDemandMove(part.caller)
		written = before
		if conds == nil {
			// As the API server stored it, so that the second write
			// finds the record unchanged.
			status.Division = ahead.Division
			part.statusPending = true
		}
	}
	if in.conflict != "" {
		return p.conflictRecheck, nil, written, nil
	}
	if err := p.publishPart(ctx, part); err != nil {
		return 0, nil, written, err
	}
	after := planFigures{
		permits: int32(pl.Result.Base), extra: int32(pl.Result.Extra), usable: int32(pl.Result.Usable),
		divisor: replicas.Divisor, source: replicas.DivisorSource,
	}
	if rsv != nil {
		// The pods divide what the reserve leaves them.
		after.permits, after.extra, after.usable = status.Division.Base, status.Division.Extra, int32(pl.Result.Usable)-part.in.reserved
	}
	return h.recheck, &planChange{after: after, configMap: part.own}, written, nil
}

// maxRecordBytes bounds a division's record (status.division's told and
// holding, in JSON) so that the object that carries it, with the rest of
// its status and its spec, stays well within etcd's request limit (1.5 MiB
// by default).
const maxRecordBytes = 1 << 20

// recordTooLarge says why a division's record does not fit, or "".
func recordTooLarge(st *v1alpha1.DivisionStatus) string {
	b, err := json.Marshal(struct {
		Told    []v1alpha1.ToldPods `json:"told,omitempty"`
		Holding []v1alpha1.HeldPods `json:"holding,omitempty"`
	}{st.Told, st.Holding})
	if err != nil || len(b) <= maxRecordBytes {
		return ""
	}
	return fmt.Sprintf("the division's record (status.division told and holding) takes %d bytes for %d pods, more than the %d it may", len(b), recordPods(st), maxRecordBytes)
}

// recordPods counts the pods a division's record names.
func recordPods(st *v1alpha1.DivisionStatus) int {
	n := 0
	for _, g := range st.Told {
		n += len(g.Pods)
	}
	for _, g := range st.Holding {
		n += len(g.Pods)
	}
	return n
}
