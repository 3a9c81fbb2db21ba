package controller

import (
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// TestDemandMovesAtMostOnceAMinute reads demands that swing at every read:
// the division moves on the first swing, keeps its targets through the
// next reads of the minute after, and moves again once the minute has
// passed.
func TestDemandMovesAtMostOnceAMinute(t *testing.T) {
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Demand = nil
	q.Spec.Shares = &v1alpha1.Shares{Policy: v1alpha1.SharesDemand}
	env := newFakeEnv(guardDeployment("shop", "api", 2), guardPod("shop", "api", "api-a"), guardPod("shop", "api", "api-b"), q)
	src := &demandSource{values: map[string]map[string]int64{}, errs: map[string]error{}, reads: map[string][]string{}}
	env.pub.demand.source = src
	s := &inlineWorld{env: env, w: newPodWorld(t, env.client), acks: true}
	s.startPod("api-a")
	s.startPod("api-b")
	revision := func() int64 { return quotaStatus(t, env, inlineGate).Division.Revision }
	read := func(a, b int64, phase string) {
		t.Helper()
		src.set("shop", map[string]int64{"api-a": a, "api-b": b}, nil)
		s.rounds(t, 3, phase)
	}

	read(20, 20, "start")
	if a, b := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate); a != 20 || b != 20 {
		t.Fatalf("start: api-a and api-b enforce %d and %d, want 20 each", a, b)
	}
	start := revision()

	advanceFake(env, DefaultDemandInterval)
	read(35, 3, "the first swing")
	moved := revision()
	if a := s.w.permits("shop", "api-a", inlineGate); moved == start || a <= 20 {
		t.Fatalf("the first swing: revision %d (was %d), api-a enforces %d; want a move towards api-a", moved, start, a)
	}
	a, b := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate)

	for i, at := range []time.Duration{15 * time.Second, 30 * time.Second, 45 * time.Second} {
		advanceFake(env, DefaultDemandInterval)
		if i%2 == 0 {
			read(3, 35, "swung back within the minute")
		} else {
			read(35, 3, "swung again within the minute")
		}
		if r := revision(); r != moved {
			t.Fatalf("%v after the move: revision %d, want %d (no move within a minute of the last)", at, r, moved)
		}
		if a2, b2 := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate); a2 != a || b2 != b {
			t.Fatalf("%v after the move: api-a and api-b enforce %d and %d, want %d and %d", at, a2, b2, a, b)
		}
	}

	advanceFake(env, DefaultDemandInterval)
	read(3, 35, "a minute after the move")
	if r, b2 := revision(), s.w.permits("shop", "api-b", inlineGate); r == moved || b2 <= b {
		t.Errorf("a minute after the move: revision %d (was %d), api-b enforces %d (was %d); want a move towards api-b", r, moved, b2, b)
	}
}
