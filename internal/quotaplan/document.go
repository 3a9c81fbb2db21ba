package quotaplan

import "github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"

// Document returns the document that publishes p to the pods: the plan of the
// quota named gate, calling downstream, for the quota generation it was
// computed from, with its content hash. The operator writes exactly this to
// the workload's ConfigMap; the same content frozen in a file is what a
// hand-tuned pod would read. The hash leaves the generation out, so only a
// change of content is published.
func (p Plan) Document(gate, downstream string, generation int64) plan.Document {
	pp := p.Result.PerPod
	d := plan.Document{
		Version:               plan.CurrentVersion,
		Gate:                  gate,
		Downstream:            downstream,
		Generation:            generation,
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
