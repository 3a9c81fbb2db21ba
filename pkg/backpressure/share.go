package backpressure

import (
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Share is what this pod may use of a gate: its own share of the plan the
// operator published, or a bootstrap share (Options.Bootstrap). "Plan" names
// only the published document (package plan); a Share is this pod's part of
// one.
type Share struct {
	// Gate names the gate: the DownstreamQuota's name.
	Gate string
	// Limits are what the gate enforces: permits, rate and burst, the
	// waiting room and its bounds, and the typical latency below which a
	// call's remaining deadline is shed at once.
	Limits gate.Limits
	// Workers is the dispatcher's worker count, for a gate named in
	// Options.Dispatchers; its queue holds Limits.QueueCapacity tasks.
	Workers int
	// RetryBudgetPerSecond refills the gate's retry budget (Runtime.Budget).
	RetryBudgetPerSecond float64
	// Deadline is the per-hop deadline the plan was sized for: put it on
	// the calls' contexts. Zero means none.
	Deadline time.Duration
	// Epoch and Revision identify the published plan, as the pod
	// acknowledges it; empty and zero for a bootstrap share.
	Epoch    string
	Revision int64
	// Hash identifies the plan's content; New computes it for a bootstrap
	// share.
	Hash string
}

// shareOf returns the public view of d, a document as this pod enforces it
// (plan.Document.For).
func shareOf(d plan.Document) Share {
	return Share{
		Gate:                 d.Gate,
		Limits:               gateLimits(d),
		Workers:              d.Workers,
		RetryBudgetPerSecond: d.RetryBudgetPerSecond,
		Deadline:             d.Deadline(),
		Epoch:                d.Epoch,
		Revision:             d.Revision,
		Hash:                 d.Hash,
	}
}

// document returns p as a plan document, for validation and enforcement.
func (p Share) document() plan.Document {
	l := p.Limits
	return plan.Document{
		Version:               plan.CurrentVersion,
		Gate:                  p.Gate,
		Hash:                  p.Hash,
		Epoch:                 p.Epoch,
		Revision:              p.Revision,
		Permits:               l.Permits,
		RatePerSecond:         l.RatePerSecond,
		Burst:                 l.Burst,
		QueueCapacity:         l.QueueCapacity,
		MaxQueueWaitSeconds:   l.MaxQueueWait.Seconds(),
		AcquireTimeoutSeconds: l.AcquireTimeout.Seconds(),
		LatencySeconds:        l.TypicalLatency.Seconds(),
		DeadlineSeconds:       p.Deadline.Seconds(),
		Workers:               p.Workers,
		RetryBudgetPerSecond:  p.RetryBudgetPerSecond,
	}
}
