package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
