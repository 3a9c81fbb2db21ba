package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// statePod returns a pod named name that is Ready or not, leaving or not,
// and in phase.
func statePod(name string, ready, leaving bool, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase}}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if leaving {
		p.DeletionTimestamp = ptr.To(metav1.Now())
	}
	return p
}

func TestReplicaStatus(t *testing.T) {
	w := &workloadFacts{specReplicas: 4, statusReplicas: 6, selector: labels.Everything()}
	h := &hpaFacts{name: "api", min: ptr.To[int32](2), max: 10, current: 6, desired: 4}
	pods := []corev1.Pod{
		statePod("serving-1", true, false, corev1.PodRunning),
		statePod("serving-2", true, false, corev1.PodRunning),
		statePod("starting", false, false, corev1.PodPending),
		statePod("leaving", true, true, corev1.PodRunning),
		statePod("evicted", false, false, corev1.PodFailed),
		statePod("completed", true, false, corev1.PodSucceeded),
	}
	got := replicaStatus(w, h, pods)
	want := v1alpha1.ReplicaStatus{
		Spec: 4, Status: 6,
		HPAMin: ptr.To[int32](2), HPAMax: ptr.To[int32](10), HPACurrent: ptr.To[int32](6), HPADesired: ptr.To[int32](4),
		ExistingPods: 6, ReadyPods: 2, Divisor: 2, DivisorSource: v1alpha1.DivisorReadyPods,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicaStatus (-want +got):\n%s", diff)
	}
	if got.HPAMin == h.min {
		t.Error("replicaStatus shares the HPA's pointer")
	}

	got = replicaStatus(w, nil, nil)
	want = v1alpha1.ReplicaStatus{Spec: 4, Status: 6, Divisor: 0, DivisorSource: v1alpha1.DivisorReadyPods}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicaStatus without HPA or pods (-want +got):\n%s", diff)
	}
}

// TestDivideRecordsAndResumes runs the controller's step over pods as the
// cache has them, and again from the status it recorded: a new Ready pod
// waits while the others are told their smaller shares, and is granted what
// their acknowledgements free.
func TestDivideRecordsAndResumes(t *testing.T) {
	const epoch, gate = "uid-1", "payments"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ack := func(p corev1.Pod, v string) corev1.Pod {
		p.Annotations = map[string]string{appliedAnnotation(gate): v}
		return p
	}
	pods := []corev1.Pod{
		statePod("a", true, false, corev1.PodRunning),
		statePod("b", true, false, corev1.PodRunning),
	}
	h := divideOnly(one(10, pods), nil, now)
	if !h.changed || h.status.Revision != 1 || h.callers[0].told["a"] != 5 || h.callers[0].told["b"] != 5 || h.status.HandedOut != 10 {
		t.Fatalf("first step: %+v %+v", h.status, h.callers[0].told)
	}
	rec := h.status

	// c turns Ready; a and b have applied revision 1.
	pods = []corev1.Pod{
		ack(statePod("a", true, false, corev1.PodRunning), epoch+"/1"),
		ack(statePod("b", true, false, corev1.PodRunning), epoch+"/1"),
		statePod("c", true, false, corev1.PodRunning),
	}
	h = divideOnly(one(10, pods), rec, now)
	if h.callers[0].told["a"] != 4 || h.callers[0].told["b"] != 3 || h.callers[0].told["c"] != 0 || h.status.Held != 10 || len(h.waiting) != 1 || len(h.pending) != 2 {
		t.Fatalf("shrink step: %+v told %v waiting %v pending %v", h.status, h.callers[0].told, h.waiting, h.pending)
	}
	if c := h.condition(); c.Reason != v1alpha1.ReasonHandoverInProgress {
		t.Errorf("condition %+v", c)
	}
	rec = h.status

	// Both acknowledge revision 2: c gets its 3.
	pods[0], pods[1] = ack(pods[0], epoch+"/2"), ack(pods[1], epoch+"/2")
	h = divideOnly(one(10, pods), rec, now.Add(time.Second))
	if h.callers[0].told["c"] != 3 || h.status.HandedOut != 10 || len(h.waiting) != 0 || len(h.pending) != 0 {
		t.Fatalf("grant step: %+v told %v", h.status, h.callers[0].told)
	}
	if c := h.condition(); c.Status != metav1.ConditionTrue {
		t.Errorf("condition %+v", c)
	}
	want := []v1alpha1.ShareCount{{Permits: 4, Pods: 1}, {Permits: 3, Pods: 2}}
	if diff := cmp.Diff(want, h.status.Shares); diff != "" {
		t.Errorf("shares (-want +got):\n%s", diff)
	}
}

// TestDivideStalled reports a pod that acknowledges plans but not its
// smaller share as stalled once stalledAfter has passed, and keeps its old
// share counted.
func TestDivideStalled(t *testing.T) {
	const epoch, gate = "uid-1", "payments"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pods := []corev1.Pod{statePod("a", true, false, corev1.PodRunning)}
	h := divideOnly(one(12, pods), nil, now)
	rec := h.status
	stuck := statePod("a", true, false, corev1.PodRunning)
	stuck.Annotations = map[string]string{appliedAnnotation(gate): epoch + "/1"}
	pods = []corev1.Pod{stuck, statePod("b", true, false, corev1.PodRunning)}
	h = divideOnly(one(12, pods), rec, now)
	rec = h.status
	if h.recheck != DefaultStalledAfter {
		t.Errorf("recheck %v, want the stall deadline %v", h.recheck, DefaultStalledAfter)
	}
	h = divideOnly(one(12, pods), rec, now.Add(DefaultStalledAfter))
	if h.callers[0].told["b"] != 0 || len(h.stalled) != 1 || h.stalled[0] != "a" {
		t.Fatalf("stalled step: told %v stalled %v", h.callers[0].told, h.stalled)
	}
	if c := h.condition(); c.Reason != v1alpha1.ReasonHandoverStalled {
		t.Errorf("condition %+v", c)
	}
}

// TestDivideRecheckUnacknowledged asks for a step when the old share of a
// pod that does not acknowledge, told a smaller share in this very step,
// stops counting; that step hands it to the pod waiting for it.
func TestDivideRecheckUnacknowledged(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pods := []corev1.Pod{statePod("a", true, false, corev1.PodRunning), statePod("b", true, false, corev1.PodRunning)}
	h := divideOnly(one(12, pods), nil, now)
	if h.recheck != 0 {
		t.Fatalf("first step: recheck %v, want none", h.recheck)
	}
	// b stops being Ready: told 0 at once, its 6 counted until the delay
	// has passed, a waits for them.
	pods[1] = statePod("b", false, false, corev1.PodRunning)
	h = divideOnly(one(12, pods), h.status, now.Add(time.Second))
	if h.callers[0].told["b"] != 0 || h.callers[0].told["a"] != 6 || h.recheck != DefaultUnacknowledgedDelay {
		t.Fatalf("shrink step: told %v recheck %v, want b 0, a 6 and a recheck after %v", h.callers[0].told, h.recheck, DefaultUnacknowledgedDelay)
	}
	h = divideOnly(one(12, pods), h.status, now.Add(time.Second+h.recheck))
	if h.callers[0].told["a"] != 12 || h.recheck != 0 || len(h.pending) != 0 {
		t.Fatalf("step at the recheck: told %v recheck %v pending %v, want a 12 and nothing left", h.callers[0].told, h.recheck, h.pending)
	}
}

// one is the callers of the payments quota's own division, of epoch uid-1.
func one(total int64, pods []corev1.Pod) []*caller {
	return []*caller{{namespace: "shop", gate: "payments", total: total, members: membersOf(pods, "", "payments", "uid-1")}}
}

// divideOnly runs one step of the division of callers from the record prev,
// at now, without pods that only the record names.
func divideOnly(callers []*caller, prev *v1alpha1.DivisionStatus, now time.Time) handoverStep {
	for _, c := range callers {
		if prev != nil {
			c.published = prev.Revision // the record's last revision was published
		}
	}
	d := &divisionInput{epoch: "uid-1", record: prev, callers: callers, now: now, clock: "test"}
	return step(d, resume(d))
}

// TestPodPermits follows status.podPermits, the PERMITS/POD column, through
// a scale-up: the share each Ready pod is told, as a range while they
// differ, where the base share (status.perPod.permits) would say 2 while
// the new pod is told 0.
func TestPodPermits(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := func(names ...string) []corev1.Pod {
		var pods []corev1.Pod
		for _, n := range names {
			pods = append(pods, statePod(n, true, false, corev1.PodRunning))
		}
		return pods
	}
	if got := divideOnly(one(10, nil), nil, now).callers[0].podPermits(); got != "0" {
		t.Errorf("no Ready pod: %q, want 0", got)
	}
	h := divideOnly(one(10, ready("a", "b", "c")), nil, now)
	if got := h.callers[0].podPermits(); got != "3-4" {
		t.Errorf("10 over 3 pods: %q, want 3-4 (one pod holds the extra permit)", got)
	}
	h = divideOnly(one(12, ready("a", "b", "c")), h.status, now)
	if got := h.callers[0].podPermits(); got != "4" {
		t.Errorf("12 over 3 pods: %q, want 4", got)
	}
	// d turns Ready: the others are told 3 at once, but may hold 4 until
	// the unacknowledged delay has passed; d waits at 0.
	h = divideOnly(one(12, ready("a", "b", "c", "d")), h.status, now)
	if got := h.callers[0].podPermits(); got != "0-3" || h.status.Base != 3 {
		t.Errorf("handover: %q (base %d), want 0-3 (base 3)", got, h.status.Base)
	}
	h = divideOnly(one(12, ready("a", "b", "c", "d")), h.status, now.Add(DefaultUnacknowledgedDelay))
	if got := h.callers[0].podPermits(); got != "3" || len(h.pending) != 0 {
		t.Errorf("handover done: %q, pending %v, want 3 and none pending", got, h.pending)
	}
	// A pod that stops being Ready no longer counts, whatever it holds.
	pods := ready("a", "b", "c", "d")
	pods[3] = statePod("d", false, false, corev1.PodRunning)
	h = divideOnly(one(12, pods), h.status, now.Add(DefaultUnacknowledgedDelay+time.Second))
	if got := h.callers[0].podPermits(); got != "3" {
		t.Errorf("d not Ready: %q, want 3 (a, b and c wait for d's 3)", got)
	}
}
