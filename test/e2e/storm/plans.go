package storm

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// StaticPlan returns the plan the operator computes for the scenario's quota
// at the given replica count, frozen as a file: the hand-tuned config that
// is right until the workload scales.
func StaticPlan(replicas int32) (plan.Document, error) {
	q, err := Quota()
	if err != nil {
		return plan.Document{}, err
	}
	p, err := quota.Size(q.Spec, replicas)
	if err != nil {
		return plan.Document{}, fmt.Errorf("storm: static plan: %w", err)
	}
	// A file gives every pod the same share: the base share of the exact
	// division at that replica count.
	d := p.Document(q.Name, q.Spec.Downstream, 0, quota.Shares{Epoch: "static", Revision: 1, Base: int(p.Result.Base)})
	return d, plan.Validate(d)
}

// NaivePlan returns the classic configuration of the incident: every pod may
// hold the downstream's whole contract in flight, with no waiting room, and
// retries are not budgeted (a budget of the whole demand per pod never
// binds).
func NaivePlan() (plan.Document, error) {
	q, err := Quota()
	if err != nil {
		return plan.Document{}, err
	}
	d := plan.Document{
		Version:              plan.CurrentVersion,
		Gate:                 q.Name,
		Downstream:           q.Spec.Downstream,
		Epoch:                "naive",
		Revision:             1,
		Permits:              int(q.Spec.Contract.Concurrency),
		DeadlineSeconds:      q.Spec.Deadline.Seconds(),
		Workers:              int(q.Spec.Contract.Concurrency),
		RetryBudgetPerSecond: RequestsPerSecond,
	}
	d.Hash = plan.Hash(d)
	return d, plan.Validate(d)
}

// WritePlanDir writes d into dir as a mounted ConfigMap volume would hold
// it: one file, <gate>.json.
func WritePlanDir(dir string, d plan.Document) error {
	b, err := plan.Marshal(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, plan.KeyFor(d.Gate)), b, 0o644)
}
