package sharetest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Doc returns a valid plan for gate with the given permits as every pod's
// share; its revision is permits+1, so plans with distinct permits are
// distinct revisions.
func Doc(gate string, permits int) plan.Document {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com", Generation: 1,
		Epoch: "epoch-1", Revision: int64(permits) + 1,
		Permits: permits, QueueCapacity: 2 * permits, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.2,
		LatencySeconds: 0.05, DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 2,
	}
	d.Hash = plan.Hash(d)
	return d
}

// WithRevision returns d at revision rev, its hash computed again.
func WithRevision(d plan.Document, rev int64) plan.Document {
	d.Revision = rev
	d.Hash = plan.Hash(d)
	return d
}

// Divided returns Doc("logistics-api", base) at revision with its own share
// for each pod in own. A named pod's workers are half its permits, so that
// a test tells them from its permits.
func Divided(base int, revision int64, own map[string]int) plan.Document {
	d := Doc("logistics-api", base)
	d.Revision = revision
	d.Pods = map[string]plan.PodShare{}
	for pod, permits := range own {
		d.Pods[pod] = plan.PodShare{Permits: permits, QueueCapacity: 3 * permits, Workers: permits / 2, RetryBudgetPerSecond: float64(permits) / 2}
	}
	d.Hash = plan.Hash(d)
	return d
}

// BootShare is an application's conservative share of gate name (see
// backpressure.Options.Bootstrap): the contract divided by the workload's
// maximum replicas.
func BootShare(name string, permits int) backpressure.Share {
	return backpressure.Share{
		Gate: name,
		Limits: gate.Limits{Permits: permits, QueueCapacity: permits, MaxQueueWait: 100 * time.Millisecond,
			AcquireTimeout: 200 * time.Millisecond},
		Workers: permits, RetryBudgetPerSecond: 1,
	}
}

// WritePlan writes d into dir the way a careful writer does: a temporary
// file renamed into place, so the source never reads half a document.
func WritePlan(t testing.TB, dir string, d plan.Document) {
	t.Helper()
	data, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	WriteFile(t, dir, plan.KeyFor(d.Gate), data)
}

// WriteFile writes data into dir/name through a temporary file renamed into
// place.
func WriteFile(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
