package observe

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

func TestObservationsTotalPermits(t *testing.T) {
	var o Observations
	five, two := 5, 2
	o.Applied("a", cluster.LogLine{Msg: cluster.MsgAppliedPlan, Permits: &five})
	o.Applied("b", cluster.LogLine{Msg: cluster.MsgAppliedPlan, Permits: &five})
	if got := o.TotalPermits(); got != 10 {
		t.Errorf("TotalPermits() = %d, want 10", got)
	}
	o.Applied("a", cluster.LogLine{Msg: cluster.MsgAppliedPlan, Permits: &two})
	o.Exited("b")
	if got := o.TotalPermits(); got != 2 {
		t.Errorf("after a shrink and an exit: TotalPermits() = %d, want 2", got)
	}
	o.Applied("c", cluster.LogLine{Msg: cluster.MsgAppliedPlan, Permits: &five})
	released := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{v1alpha1.AppliedAnnotationPrefix + "g": "e/released"}}}
	o.ack(time.Now(), released, "g")
	if got, _ := o.PermitsOf([]string{"a", "c"}, ""); got != 2 || o.TotalPermits() != 2 {
		t.Errorf("after c released its share: PermitsOf(a, c) = %d, TotalPermits() = %d, want 2 and 2", got, o.TotalPermits())
	}
	if acks := o.Acks(); len(acks) != 1 || !acks[0].Ack.Released || o.LastAcks()["c"] != "e/released" {
		t.Errorf("acks %+v, last %v", acks, o.LastAcks())
	}
}
