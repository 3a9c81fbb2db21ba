package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// A quota or contract deleted while it is reconciled has no status left to
// write: the reconcile ends without an error, which controller-runtime
// would log as "Reconciler error" with a stack trace.
func TestStatusWriteOfADeletedObjectIsNoError(t *testing.T) {
	env := newFakeEnv()
	q := builders.MakeQuota("shop", "gone").Obj()
	q.ResourceVersion = "7"
	status := &v1alpha1.DownstreamQuotaStatus{ObservedGeneration: 1}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished}
	if _, written, err := env.pub.writeStatus(t.Context(), q, status, ready); err != nil || written {
		t.Errorf("writeStatus of a deleted quota = written %v, %v; want nothing written and no error", written, err)
	}

	r := NewDownstreamContractReconciler(env.pub)
	dc := builders.MakeContract("gone").Obj()
	dc.ResourceVersion = "7"
	if err := r.writeContract(t.Context(), dc, &v1alpha1.DownstreamContractStatus{ObservedGeneration: 1}); err != nil {
		t.Errorf("writeContract of a deleted contract = %v; want no error", err)
	}
}

// A deleted status.division wakes its quota or contract: nothing else may
// change for a long time, and until the record is rebuilt nothing new is
// published.
func TestDivisionLostWakes(t *testing.T) {
	withRecord := &v1alpha1.DownstreamContract{Status: v1alpha1.DownstreamContractStatus{Division: &v1alpha1.DivisionStatus{Revision: 4}}}
	without := withRecord.DeepCopy()
	without.Status.Division = nil
	if !divisionLost.Update(event.UpdateEvent{ObjectOld: withRecord, ObjectNew: without}) {
		t.Error("a contract whose record was deleted is not reconciled")
	}
	if divisionLost.Update(event.UpdateEvent{ObjectOld: without, ObjectNew: withRecord}) {
		t.Error("a contract whose record was written is reconciled again")
	}
	q := &v1alpha1.DownstreamQuota{Status: v1alpha1.DownstreamQuotaStatus{Division: &v1alpha1.DivisionStatus{Revision: 4}}}
	if !divisionLost.Update(event.UpdateEvent{ObjectOld: q, ObjectNew: &v1alpha1.DownstreamQuota{}}) {
		t.Error("a quota whose record was deleted is not reconciled")
	}
}
