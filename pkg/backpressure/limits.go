package backpressure

import (
	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// gateLimits returns the limits a gate enforces for the plan d. The
// document's deadline is not a gate limit: it is the per-hop deadline the
// plan was sized for, for the caller to put on its calls' contexts.
//
// Every value of a valid plan is one a gate holds: plan.MaxPermits is
// gate.MaxPermits. Permits above it are lowered all the same, the safe
// direction, for a document that did not pass plan.Validate.
func gateLimits(d plan.Document) gate.Limits {
	return gate.Limits{
		Permits:        min(d.Permits, gate.MaxPermits),
		RatePerSecond:  d.RatePerSecond,
		Burst:          d.Burst,
		QueueCapacity:  d.QueueCapacity,
		MaxQueueWait:   d.MaxQueueWait(),
		AcquireTimeout: d.AcquireTimeout(),
		TypicalLatency: d.Latency(),
	}
}

// dispatchLimits returns the limits of the dispatcher for the plan d: its
// workers, and a queue as large as the gate's waiting room, so that the
// backlog a dispatcher takes on is the one the plan allows in front of the
// downstream.
func dispatchLimits(d plan.Document) dispatch.Limits {
	return dispatch.Limits{Workers: d.Workers, QueueCapacity: d.QueueCapacity}
}

// retryBurst is the burst the retry budget is given: zero means one second's
// worth of tokens, at least one (see retry.Budget.SetRate), since the
// document carries only the rate.
const retryBurst = 0
