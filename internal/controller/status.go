package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// staleRecheck is how soon a division whose record could not be written,
// because the cache held an older object, is stepped again: the cache is
// usually a few milliseconds behind.
const staleRecheck = 50 * time.Millisecond

// errStale says that a status was computed from an object older than the
// API server's, with another division record: nothing was written, and the
// reconcile must run again from the current object (after staleRecheck).
var errStale = errors.New("controller: the division record changed since it was read")

// recordDivision writes division as obj's status.division (set puts it
// there) under obj's resourceVersion, and returns the object written. When
// obj is stale it writes nothing and returns errStale: the step was computed
// from an old record and must be computed again. A contract keeps its
// record this way; a quota's record goes with the rest of its status
// (recordStatus).
func recordDivision[T client.Object](ctx context.Context, c client.Client, obj T, set func(T)) (T, error) {
	updated := obj.DeepCopyObject().(T)
	set(updated)
	err := c.Status().Patch(ctx, updated, client.MergeFromWithOptions(obj, client.MergeFromWithOptimisticLock{}))
	switch {
	case err == nil:
		return updated, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return obj, errStale
	}
	return obj, fmt.Errorf("controller: record division of %s: %w", client.ObjectKeyFromObject(obj), err)
}

// writeStatus sets the conditions conds in status and writes status as q's
// status, in one merge patch under q's resourceVersion, when it differs from
// what q has. The cache may lag behind this controller's own last write:
// when the patch conflicts, it compares with the API server's copy instead,
// and writes under that copy's resourceVersion only if that still differs
// and holds the division q held. A division that changed meanwhile means
// status was computed from an old record: nothing is written and the error
// is errStale. It returns the status the write replaced, and whether it
// wrote; q then holds the result. A quota whose spec changed since q was
// read is left alone: the generation change brings another reconcile.
func (p *Publisher) writeStatus(ctx context.Context, q *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds ...metav1.Condition) (*v1alpha1.DownstreamQuotaStatus, bool, error) {
	base := q
	for attempt := 0; ; attempt++ {
		prev, written, err := p.patchStatus(ctx, q, base, status, conds)
		switch {
		case err == nil:
			return prev, written, nil
		case apierrors.IsNotFound(err):
			// The quota was deleted while it was reconciled: there is no
			// status left to write, and nothing went wrong.
			return nil, false, nil
		case !apierrors.IsConflict(err) || attempt > 0:
			return nil, false, fmt.Errorf("controller: write status of quota %s/%s: %w", q.Namespace, q.Name, err)
		}
		live := &v1alpha1.DownstreamQuota{}
		if err := p.apiReader.Get(ctx, client.ObjectKeyFromObject(q), live); err != nil {
			return nil, false, client.IgnoreNotFound(err)
		}
		if live.Generation != q.Generation {
			return nil, false, nil
		}
		if !equality.Semantic.DeepEqual(live.Status.Division, q.Status.Division) {
			return nil, false, errStale
		}
		base = live
	}
}

// recordStatus writes status, with the conditions conds set in it, as q's
// status under q's resourceVersion, as recordDivision writes a division
// record: when q is stale it writes nothing and returns errStale.
func (p *Publisher) recordStatus(ctx context.Context, q *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds ...metav1.Condition) error {
	_, _, err := p.patchStatus(ctx, q, q, status, conds)
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return errStale
	}
	return fmt.Errorf("controller: record status of quota %s/%s: %w", q.Namespace, q.Name, err)
}

// patchStatus writes status, with the conditions conds set in it over
// base's, as q's status in one merge patch under base's resourceVersion,
// unless base has it already. It returns the status the write replaced and
// whether it wrote; status and q then hold the result as the API server
// stored it, which keeps times to the microsecond (a record's shrunkAt), so
// that comparing with it again finds nothing to write.
func (p *Publisher) patchStatus(ctx context.Context, q, base *v1alpha1.DownstreamQuota, status *v1alpha1.DownstreamQuotaStatus, conds []metav1.Condition) (*v1alpha1.DownstreamQuotaStatus, bool, error) {
	want := status.DeepCopy()
	want.Conditions = slices.Clone(base.Status.Conditions)
	now := p.clock.Now()
	for _, c := range conds {
		setCondition(&want.Conditions, c, q.Generation, now)
	}
	if equality.Semantic.DeepEqual(&base.Status, want) {
		return nil, false, nil
	}
	updated := base.DeepCopy()
	updated.Status = *want
	if err := p.client.Status().Patch(ctx, updated, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
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

// withoutReadyPods returns the per-pod share, demand and findings a status
// shows for pl, sized over divisor pods. With no Ready pod (divisor 0) pl
// was sized over one pod, to validate the spec and show the rest of the
// arithmetic; but no pod holds anything, so the status says 0 permits per
// pod (PERMITS/POD) rather than the whole usable total, and drops
// QuotaTooSmall, which would only say that a shared contract's part of 0
// for a caller without Ready pods gives a pod nothing: a nightly job
// scaled to 0 is not a problem to report.
func withoutReadyPods(pl quota.Sizing, divisor int32) (*v1alpha1.PerPodPlan, *v1alpha1.DemandStatus, []v1alpha1.Diagnostic) {
	perPod := pl.PerPod
	if divisor > 0 {
		return &perPod, pl.Demand, pl.Diagnostics
	}
	perPod.Permits = 0
	diags := slices.DeleteFunc(slices.Clone(pl.Diagnostics), func(d v1alpha1.Diagnostic) bool {
		return d.Reason == v1alpha1.ReasonQuotaTooSmall
	})
	return &perPod, pl.Demand, diags
}
