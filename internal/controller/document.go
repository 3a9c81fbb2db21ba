package controller

import (
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quotaplan"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// planDocument assembles the document published for q's plan p, with its
// content hash. Generation is the quota generation the plan was computed
// from; the hash leaves it out, so only a change of content is published.
func planDocument(q *v1alpha1.DownstreamQuota, p quotaplan.Plan) plan.Document {
	pp := p.Result.PerPod
	d := plan.Document{
		Version:               plan.CurrentVersion,
		Gate:                  q.Name,
		Downstream:            q.Spec.Downstream,
		Generation:            q.Generation,
		Permits:               pp.Permits,
		RatePerSecond:         pp.RatePerSecond,
		Burst:                 pp.Burst,
		QueueCapacity:         pp.QueueCapacity,
		MaxQueueWaitSeconds:   pp.MaxQueueWait.Seconds(),
		AcquireTimeoutSeconds: pp.AcquireTimeout.Seconds(),
		LatencySeconds:        p.Input.Latency.Seconds(),
		DeadlineSeconds:       p.Input.Deadline.Seconds(),
		Workers:               pp.Workers,
		RetryBudgetPerSecond:  pp.RetryBudgetPerSecond,
	}
	d.Hash = plan.Hash(d)
	return d
}

// currentDocument reports whether data is a valid document whose content
// hashes to hash, so that publishing a plan of that hash would change
// nothing a reader enforces. The hash is recomputed rather than trusted, so
// a hand-edited value is put back.
func currentDocument(data, hash string) bool {
	if data == "" {
		return false
	}
	d, err := plan.Parse([]byte(data))
	return err == nil && d.Hash == hash && plan.Hash(d) == hash
}
