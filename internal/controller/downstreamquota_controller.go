package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
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
// Build it with NewDownstreamQuotaReconciler.
type DownstreamQuotaReconciler struct {
	client          client.Client
	apiReader       client.Reader
	recorder        events.EventRecorder
	clock           clock.PassiveClock
	conflictRecheck time.Duration
	// applied is what this reconciler last applied as each quota's gate,
	// so that the ConfigMap's update coming back through the watch does
	// not reconcile the quota once more for nothing; see ownGateWrite.
	applied appliedGates
}

var _ reconcile.Reconciler = (*DownstreamQuotaReconciler)(nil)

// Option configures a DownstreamQuotaReconciler.
type Option func(*DownstreamQuotaReconciler)

// WithClock sets the clock that stamps condition transitions; the default
// is the real clock.
func WithClock(c clock.PassiveClock) Option {
	return func(r *DownstreamQuotaReconciler) { r.clock = c }
}

// WithConflictRecheck sets how often a quota in ConfigMapConflict checks
// again; the default is DefaultConflictRecheck.
func WithConflictRecheck(d time.Duration) Option {
	return func(r *DownstreamQuotaReconciler) { r.conflictRecheck = d }
}

// NewDownstreamQuotaReconciler returns a reconciler that reads through c
// (the manager's cache-backed client, with the indexes of package indexer),
// checks ConfigMaps outside the cache through apiReader, and records events
// with recorder.
func NewDownstreamQuotaReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts ...Option) *DownstreamQuotaReconciler {
	r := &DownstreamQuotaReconciler{
		client:          c,
		apiReader:       apiReader,
		recorder:        recorder,
		clock:           clock.RealClock{},
		conflictRecheck: DefaultConflictRecheck,
	}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Reconcile brings one quota's published gate and status up to date, or
// withdraws its gate when the quota is gone.
func (r *DownstreamQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	q := &v1alpha1.DownstreamQuota{}
	if err := r.client.Get(ctx, req.NamespacedName, q); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("controller: get quota %s: %w", req.NamespacedName, err)
		}
		r.applied.forget(req.NamespacedName)
		return ctrl.Result{}, r.withdraw(ctx, req.Namespace, req.Name, "")
	}
	if !q.DeletionTimestamp.IsZero() {
		// Another finalizer keeps the quota for now; its pods' gate goes.
		return ctrl.Result{}, r.withdraw(ctx, q.Namespace, q.Name, "")
	}
	if q.Spec.ContractRef != nil {
		// The contract's reconciler divides, publishes and writes the
		// status of the quotas that share it; this one only says when
		// there is no contract to share.
		why, err := r.contractMissing(ctx, q)
		if err != nil || why == "" {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.reportContractMissing(ctx, q, why)
	}

	status := q.Status.DeepCopy()
	status.ObservedGeneration = q.Generation
	in := readiness{workload: q.Spec.WorkloadRef, published: status.ConfigMap}
	var (
		result ctrl.Result
		change *planChange
	)
	f, err := r.observe(ctx, q)
	var invalid *quota.FieldError
	switch {
	case errors.As(err, &invalid):
		in.invalid = invalid
	case err != nil:
		return ctrl.Result{}, err
	case f.workload == nil:
		in.workloadMissing = true
	default:
		if result, change, err = r.publishPlan(ctx, q, f, status, &in); err != nil {
			return ctrl.Result{}, err
		}
		if in.stale {
			// The step was computed from an old record: nothing of it may
			// be written, not even through the status write's retry.
			return result, nil
		}
	}

	prev, written, err := r.writeStatus(ctx, q, status, in.conditions()...)
	if err != nil {
		return result, err
	}
	if in.recorded != nil {
		// The status was written ahead of publishing, with the division's
		// record; the events compare with the status as it was before that.
		prev, written = in.recorded.before, true
	}
	if !written {
		return result, nil
	}
	// Events follow a status write, judged against the status the API
	// server had, so a reconcile that read a stale cache reports nothing
	// twice. Each plan change is its own event with its own numbers: events
	// about an object aggregate by its reference, and q now carries the new
	// resourceVersion.
	r.warnOnChange(q, prev, status, v1alpha1.ConditionReady, v1alpha1.ReasonConfigMapConflict)
	r.warnOnFindings(q, prev, status)
	if change != nil {
		if c := change.since(prev); c != nil {
			r.recorder.Eventf(q, nil, corev1.EventTypeNormal, EventReasonPlanChanged, EventActionPublish, "%s", c.message())
		}
	}
	r.warnOnChange(q, prev, status, v1alpha1.ConditionHandedOver, v1alpha1.ReasonHandoverStalled)
	return result, nil
}

// warnOnChange records a Warning event about q with the condition's reason
// and message when status has the condition of type with reason and prev
// did not have it with the same status, reason and message.
func (r *DownstreamQuotaReconciler) warnOnChange(q *v1alpha1.DownstreamQuota, prev, status *v1alpha1.DownstreamQuotaStatus, typ, reason string) {
	if c := meta.FindStatusCondition(status.Conditions, typ); c != nil && c.Reason == reason && !sameCondition(prev.Conditions, *c) {
		r.recorder.Eventf(q, nil, corev1.EventTypeWarning, reason, EventActionPublish, "%s", c.Message)
	}
}

// publishPlan computes the plan from the facts, runs one handover step,
// records it, publishes it and fills the status and the readiness in. It
// returns the change of the published plan's arithmetic, if any, for an
// event.
func (r *DownstreamQuotaReconciler) publishPlan(ctx context.Context, q *v1alpha1.DownstreamQuota, f facts, status *v1alpha1.DownstreamQuotaStatus, in *readiness) (ctrl.Result, *planChange, error) {
	replicas := replicaStatus(f.workload, f.hpa, f.pods)
	status.Replicas, in.replicas = &replicas, &replicas
	if f.hpaMissing {
		in.missingHPA = q.Spec.HPAName
	}
	p, err := quota.Size(q.Spec, max(replicas.Divisor, 1))
	if err != nil {
		in.invalid = err
		return ctrl.Result{}, nil, nil
	}
	status.PerPod, status.Demand, status.Diagnostics = &p.PerPod, p.Demand, p.Diagnostics
	over, err := r.oversubscription(ctx, q.Spec.Downstream)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if over != nil {
		status.Diagnostics = append(slices.Clone(status.Diagnostics), *over)
	}
	in.permits, in.diagnostics = p.PerPod.Permits, status.Diagnostics

	epoch := string(q.UID)
	h := divide([]caller{{total: usableTotal(p), members: membersOf(f.pods, q.Name, epoch)}}, q.Status.Division, epoch, q.Spec.Handover, r.clock.Now())
	status.Division, in.handover = h.status, &h

	doc := p.Document(q.Name, q.Spec.Downstream, q.Generation, h.document(""))
	data, err := plan.Marshal(doc)
	if err != nil {
		in.invalid = err
		return ctrl.Result{}, nil, nil
	}
	name := quota.ConfigMapName(q)
	target, conflict, err := r.target(ctx, q, name)
	if err != nil {
		return ctrl.Result{}, nil, err
	}
	if conflict != "" {
		in.conflict = conflict
		if status.ConfigMap != nil && status.ConfigMap.Name == name {
			status.ConfigMap = nil
		}
		in.published = status.ConfigMap
	} else {
		status.ConfigMap = &v1alpha1.PublishedConfigMap{Name: name, Key: plan.KeyFor(q.Name), Hash: doc.Hash}
		in.published = status.ConfigMap
		status.Rollout = rolloutStatus(f.pods, q.Name, plan.AckFor(doc))
		in.applied = countApplied(f.pods, q.Name, plan.AckFor(doc))
		status.PodsApplied = in.applied.text()
	}
	if h.changed {
		// Write ahead: what every pod is told and may still hold is on
		// record before any pod is told it, so that neither a restart nor
		// a stale cache can forget capacity a pod may hold. The whole
		// status goes in the same write, as it stands once the document
		// is published, rather than in a second write after it: one write
		// fewer on every change of the division. Should the publication
		// then fail, the reconcile fails and its retry publishes.
		before := q.Status.DeepCopy()
		ok, err := r.recordStatus(ctx, q, status, in.conditions()...)
		if err != nil || !ok {
			in.stale = true
			return ctrl.Result{RequeueAfter: staleRecheck}, nil, err
		}
		in.recorded = &recorded{before: before}
	}
	if conflict != "" {
		return ctrl.Result{RequeueAfter: r.conflictRecheck}, nil, nil
	}
	if err := r.publish(ctx, q, target, doc.Hash, data); err != nil {
		return ctrl.Result{}, nil, err
	}
	// The gate is in place in its ConfigMap; only now may it leave any
	// other, so that the pods are never without it.
	if err := r.withdraw(ctx, q.Namespace, q.Name, name); err != nil {
		return ctrl.Result{}, nil, err
	}
	return ctrl.Result{RequeueAfter: h.recheck}, &planChange{
		after: planFigures{
			permits: int32(p.Result.Base), extra: int32(p.Result.Extra), usable: int32(p.Result.Usable),
			divisor: replicas.Divisor, source: replicas.DivisorSource,
		},
		configMap: name,
	}, nil
}

// staleRecheck is how soon a quota whose division record could not be
// written, because the cache held an older quota, tries again: the cache
// is usually a few milliseconds behind.
const staleRecheck = 50 * time.Millisecond

// recordDivision writes division as obj's status.division (set puts it
// there) under obj's resourceVersion, and returns the object written and
// true. When obj is stale it writes nothing and returns obj and false: the
// step was computed from an old record and must be computed again. A quota
// and a contract keep their records the same way.
func recordDivision[T client.Object](ctx context.Context, c client.Client, obj T, set func(T)) (T, bool, error) {
	updated := obj.DeepCopyObject().(T)
	set(updated)
	err := c.Status().Patch(ctx, updated, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		return updated, true, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return obj, false, nil
	}
	return obj, false, fmt.Errorf("controller: record division of %s: %w", client.ObjectKeyFromObject(obj), err)
}

// writeStatus sets the conditions conds in status and writes status as q's
// status, in one merge patch under q's resourceVersion, when it differs from
// what q has. The cache may lag behind this controller's own last write:
// when the patch conflicts, it compares with the API server's copy instead,
// and writes under that copy's resourceVersion only if that still differs.
// It returns the status the write replaced, and whether it wrote; q then
// holds the result. A quota whose spec changed since q was read is left
// alone: the generation change brings another reconcile.
func (r *DownstreamQuotaReconciler) writeStatus(ctx context.Context, q *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds ...metav1.Condition) (*v1alpha1.DownstreamQuotaStatus, bool, error) {
	base := q
	for attempt := 0; ; attempt++ {
		prev, written, err := r.patchStatus(ctx, q, base, status, conds)
		switch {
		case err == nil:
			return prev, written, nil
		case !apierrors.IsConflict(err) || attempt > 0:
			return nil, false, fmt.Errorf("controller: write status of quota %s/%s: %w", q.Namespace, q.Name, err)
		}
		live := &v1alpha1.DownstreamQuota{}
		if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(q), live); err != nil {
			return nil, false, client.IgnoreNotFound(err)
		}
		if live.Generation != q.Generation {
			return nil, false, nil
		}
		base = live
	}
}

// recordStatus writes status, with the conditions conds set in it, as q's
// status under q's resourceVersion, as recordDivision writes a division
// record: it returns true when it wrote, with q holding the result, and
// false when q is stale, having written nothing.
func (r *DownstreamQuotaReconciler) recordStatus(ctx context.Context, q *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds ...metav1.Condition) (bool, error) {
	_, _, err := r.patchStatus(ctx, q, q, status, conds)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("controller: record status of quota %s/%s: %w", q.Namespace, q.Name, err)
}

// patchStatus writes status, with the conditions conds set in it over
// base's, as q's status in one merge patch under base's resourceVersion,
// unless base has it already. It returns the status the write replaced and
// whether it wrote; status and q then hold the result as the API server
// stored it, which keeps times to the microsecond (a share's shrunkAt), so
// that comparing with it again finds nothing to write.
func (r *DownstreamQuotaReconciler) patchStatus(ctx context.Context, q, base *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds []metav1.Condition) (*v1alpha1.DownstreamQuotaStatus, bool, error) {
	want := status.DeepCopy()
	want.Conditions = slices.Clone(base.Status.Conditions)
	now := r.clock.Now()
	for _, c := range conds {
		setCondition(&want.Conditions, c, q.Generation, now)
	}
	if equality.Semantic.DeepEqual(&base.Status, want) {
		return nil, false, nil
	}
	updated := base.DeepCopy()
	updated.Status = *want
	if err := r.client.Status().Patch(ctx, updated, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return nil, false, err
	}
	prev := base.Status.DeepCopy()
	*status, *q = *updated.Status.DeepCopy(), *updated
	return prev, true, nil
}

// sameCondition reports whether conds already has c's type with its status,
// reason and message.
func sameCondition(conds []metav1.Condition, c metav1.Condition) bool {
	old := meta.FindStatusCondition(conds, c.Type)
	return old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message
}
