package controller

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// terminatingPod is a pod being deleted whose annotation for the payments gate says
// ack.
func terminatingPod(name, ack string) *corev1.Pod {
	now := metav1.Now()
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: name, DeletionTimestamp: &now,
		Annotations: map[string]string{appliedAnnotation("payments"): ack},
	}}
}

// A release said by a terminating pod is remembered for its epoch only,
// an acknowledgement that is not a release is not, and a memory older
// than releaseMemory is forgotten by a later sweep.
func TestReleasesRemembersWhatATerminatingPodSaid(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &releases{now: func() time.Time { return at }}

	r.observe(terminatingPod("a", "e1/released"))
	r.observe(terminatingPod("b", "e1/7"))
	live := terminatingPod("c", "e1/released")
	live.DeletionTimestamp = nil
	r.observe(live)

	if _, ok := r.released("shop", "a", "payments", "e1"); !ok {
		t.Error("a's release in e1 is not remembered")
	}
	if _, ok := r.released("shop", "a", "payments", "e2"); ok {
		t.Error("a's release in e1 counts for e2")
	}
	if _, ok := r.released("shop", "a", "search", "e1"); ok {
		t.Error("a's release of payments counts for search")
	}
	if _, ok := r.released("shop", "b", "payments", "e1"); ok {
		t.Error("b acknowledged a revision, not a release, and is remembered as released")
	}
	if _, ok := r.released("shop", "c", "payments", "e1"); ok {
		t.Error("c is not being deleted and is remembered")
	}

	// Within releaseMemory of a's release nothing is swept; past it plus
	// one sweep interval, the next observation forgets a.
	at = at.Add(releaseMemory)
	r.observe(terminatingPod("d", "e1/released"))
	if _, ok := r.released("shop", "a", "payments", "e1"); !ok {
		t.Error("a is forgotten within releaseMemory")
	}
	at = at.Add(pruneEvery + time.Second)
	r.observe(terminatingPod("e", "e1/released"))
	if _, ok := r.released("shop", "a", "payments", "e1"); ok {
		t.Error("a is still remembered past releaseMemory and a sweep")
	}
	if _, ok := r.released("shop", "d", "payments", "e1"); !ok {
		t.Error("d, seen within releaseMemory, is forgotten")
	}
}

// BenchmarkReleasesObserve observes the deletion of pods in a rollout
// that keeps thousands of memories: an observation stays cheap because
// the map is swept only every pruneEvery.
func BenchmarkReleasesObserve(b *testing.B) {
	r := &releases{}
	for i := range 20000 {
		r.observe(terminatingPod("old-"+strconv.Itoa(i), "e1/released"))
	}
	pod := terminatingPod("new", "e1/released")
	b.ResetTimer()
	for b.Loop() {
		r.observe(pod)
	}
}
