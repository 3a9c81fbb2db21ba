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

// A lapse of a pod's plan source and its end log the plan's hash again with
// the permits then in force: the pod's permits follow them.
func TestObservationsFollowALapse(t *testing.T) {
	var o Observations
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for i, permits := range []int{5, 0, 5} {
		o.Applied("a", cluster.LogLine{Time: t0.Add(time.Duration(i) * time.Second), Msg: cluster.MsgAppliedPlan, Hash: "h", Permits: &permits})
		if got, _ := o.PermitsOf([]string{"a"}, ""); got != permits {
			t.Errorf("after line %d: PermitsOf(a) = %d, want %d", i, got, permits)
		}
	}
	if got := o.AppliedPlans(); len(got) != 3 || !got[0].Time.Equal(t0) || got[0].Permits != 5 {
		t.Errorf("AppliedPlans() = %+v, want the three lines, the first at %v", got, t0)
	}
}
