package quota

import (
	"maps"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Shares says who holds what in one published document: the shares of a
// quota's pods at one revision of its division.
type Shares struct {
	// Epoch identifies the division in the pods' acknowledgements.
	Epoch string
	// Revision is the document's revision within the epoch (at least 1).
	Revision int64
	// Base is the permits of a pod the document does not name. The
	// operator publishes 0: a pod it has not granted a share to holds
	// nothing. A hand-written document gives every pod the same share.
	Base int
	// Pods maps each named pod to its permits.
	Pods map[string]int
	// Holding maps each pod that may still hold more than it is told to
	// what it may hold (plan.Document.Holding).
	Holding map[string]int
	// UnacknowledgedDelay is the handover's spec.handover.unacknowledgedDelay
	// in effect (plan.Document.UnacknowledgedDelaySeconds); 0 leaves it out.
	UnacknowledgedDelay time.Duration
	// Reserve is the part of the quota's reserve the document gives its
	// permit server's replicas: permits lent per call to a pod whose own
	// are taken, which can serve its waiters too. 0 without a reserve.
	Reserve int
	// Lenders names the permit server's replicas among Pods: their
	// permits are slices of the reserve, which they lend rather than
	// admit calls with, so they have no waiting room of their own to size.
	Lenders map[string]bool
}

// Document returns the document (the plan) that publishes p to the pods:
// the plan of the quota named gate, calling downstream, for the quota generation it was
// computed from, with every pod's share as shares says and the content hash.
// Each share is p's share for that many permits (Result.ShareFor): the
// workers follow the pod's own permits, and the rate, burst and retry
// budget are its part of the usable totals in proportion to its permits.
// The waiting room follows the permits that can serve the pod's waiters:
// its own, and with a reserve the reserve's too
// (Result.ShareWithReserve), except for the replicas of the permit server
// (shares.Lenders), whose share is ShareFor's. The hash leaves the
// generation out, so only a change of content is published.
func (p Sizing) Document(gate, downstream string, generation int64, shares Shares) plan.Document {
	base := p.Result.ShareWithReserve(shares.Base, shares.Reserve)
	d := plan.Document{
		Version:               plan.CurrentVersion,
		Gate:                  gate,
		Downstream:            downstream,
		Generation:            generation,
		Epoch:                 shares.Epoch,
		Revision:              shares.Revision,
		MaxQueueWaitSeconds:   base.MaxQueueWait.Seconds(),
		AcquireTimeoutSeconds: base.AcquireTimeout.Seconds(),
		LatencySeconds:        p.Input.Latency.Seconds(),
		DeadlineSeconds:       p.Input.Deadline.Seconds(),

		UnacknowledgedDelaySeconds: shares.UnacknowledgedDelay.Seconds(),
	}.WithShare(base.PodShare)
	if len(shares.Pods) > 0 {
		d.Pods = make(map[string]plan.PodShare, len(shares.Pods))
		for pod, permits := range shares.Pods {
			reserve := shares.Reserve
			if shares.Lenders[pod] {
				reserve = 0
			}
			d.Pods[pod] = p.Result.ShareWithReserve(permits, reserve).PodShare
		}
	}
	if len(shares.Holding) > 0 {
		d.Holding = maps.Clone(shares.Holding)
	}
	d.Hash = plan.Hash(d)
	return d
}
