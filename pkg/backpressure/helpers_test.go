package backpressure_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// doc returns a valid plan for gate with the given permits as every pod's
// share; its revision is permits+1, so plans with distinct permits are
// distinct revisions.
func doc(gate string, permits int) plan.Document {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com", Generation: 1,
		Epoch: "epoch-1", Revision: int64(permits) + 1,
		Permits: permits, QueueCapacity: 2 * permits, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.2,
		LatencySeconds: 0.05, DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 2,
	}
	d.Hash = plan.Hash(d)
	return d
}

// writePlan writes d into dir the way a careful writer does: a temporary
// file renamed into place, so the source never reads half a document.
func writePlan(t testing.TB, dir string, d plan.Document) {
	t.Helper()
	data, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, plan.KeyFor(d.Gate), data)
}

func writeFile(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every few milliseconds until it holds or timeout
// passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustGate returns rt's gate name, failing the test when it has none.
func mustGate(t testing.TB, rt *backpressure.Runtime, name string) *gate.Gate {
	t.Helper()
	g, err := rt.Gate(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// mustBudget returns rt's retry budget of gate name.
func mustBudget(t testing.TB, rt *backpressure.Runtime, name string) *retry.Budget {
	t.Helper()
	b, err := rt.Budget(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mustDispatcher returns rt's dispatcher of gate name.
func mustDispatcher(t testing.TB, rt *backpressure.Runtime, name string) *dispatch.Dispatcher {
	t.Helper()
	d, err := rt.Dispatcher(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mustShare returns the share in force on rt's gate name.
func mustShare(t testing.TB, rt *backpressure.Runtime, name string) backpressure.Share {
	t.Helper()
	p, err := rt.Share(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
