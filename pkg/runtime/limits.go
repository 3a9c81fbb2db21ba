package runtime

import (
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// GateLimits returns the limits a gate enforces for the plan d. The
// document's deadline is not a gate limit: it is the per-hop deadline the
// plan was sized for, for the caller to put on its calls' contexts.
//
// Permits above gate.MaxPermits are lowered to it. A plan may hold up to
// plan.MaxCount permits, which no gate can count; lowering them is the safe
// direction, and at a million calls in flight per pod the limit does not
// bind anyway. New and every reload log when that happens.
func GateLimits(d plan.Document) gate.Limits {
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

// DispatchLimits returns the limits of the dispatcher for the plan d: its
// workers, and a queue as large as the gate's waiting room, so that the
// backlog a dispatcher takes on is the one the plan allows in front of the
// downstream.
func DispatchLimits(d plan.Document) dispatch.Limits {
	return dispatch.Limits{Workers: d.Workers, QueueCapacity: d.QueueCapacity}
}

// retryBurst is the burst the retry budget is given: zero means one second's
// worth of tokens, at least one (see retry.Budget.SetRate), since the
// document carries only the rate.
const retryBurst = 0
