package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// TestSpecChangePublishesANewRevision changes what the quota's document
// says without moving a share: the unacknowledged delay, then the
// downstream's latency (a new generation). Each is published under a new
// revision, which the pods put in force; published under the revision
// they enforce, the runtime would keep its old document, and with it the
// old delay it lapses by.
func TestSpecChangePublishesANewRevision(t *testing.T) {
	s := newInlineWorld(t, true)
	before, _ := inlineDocument(t, s.env)

	update(t, s.env, &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: inlineGate}}, func(q *v1alpha1.DownstreamQuota) {
		q.Spec.Handover.UnacknowledgedDelay = &metav1.Duration{Duration: 40 * time.Second}
	})
	s.rounds(t, 2, "delay changed")
	after, _ := inlineDocument(t, s.env)
	if after.Revision <= before.Revision || after.UnacknowledgedDelaySeconds != 40 {
		t.Fatalf("after the delay changed: revision %d (was %d), delay %vs; want a newer revision saying 40s", after.Revision, before.Revision, after.UnacknowledgedDelaySeconds)
	}
	for _, pod := range []string{"api-a", "api-b"} {
		if d := s.w.procs[procKey{"shop", pod, inlineGate}].doc; d.Revision != after.Revision || d.UnacknowledgedDelaySeconds != 40 {
			t.Errorf("%s enforces revision %d with a delay of %vs, want revision %d with 40s", pod, d.Revision, d.UnacknowledgedDelaySeconds, after.Revision)
		}
	}

	// A new generation: the fake client keeps metadata.generation as
	// given, so the change sets it as the API server would.
	update(t, s.env, &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: inlineGate}}, func(q *v1alpha1.DownstreamQuota) {
		q.Generation++
		q.Spec.Latency.Typical = metav1.Duration{Duration: 2 * q.Spec.Latency.Typical.Duration}
	})
	s.rounds(t, 2, "latency changed")
	again, _ := inlineDocument(t, s.env)
	if again.Revision <= after.Revision || again.Generation == after.Generation {
		t.Fatalf("after the latency changed: revision %d (was %d), generation %d (was %d); want both newer", again.Revision, after.Revision, again.Generation, after.Generation)
	}
	if d := s.w.procs[procKey{"shop", "api-a", inlineGate}].doc; d.Hash != again.Hash {
		t.Errorf("api-a enforces the document of revision %d, want revision %d", d.Revision, again.Revision)
	}

	// Nothing changed: no new revision.
	s.rounds(t, 2, "nothing changed")
	if last, _ := inlineDocument(t, s.env); last.Revision != again.Revision {
		t.Errorf("with nothing changed the revision moved from %d to %d", again.Revision, last.Revision)
	}
}
