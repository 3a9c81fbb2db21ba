package quotaplan

import "github.com/backpressure-dev/backpressure-operator/api/plan"

// Division says who holds what in a published document.
type Division struct {
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
}

// Document returns the document that publishes p to the pods: the plan of
// the quota named gate, calling downstream, for the quota generation it was
// computed from, with every pod's share as div says and the content hash.
// Each share is p's share for that many permits (Result.ShareFor): the
// waiting room and workers follow the pod's own permits, and the rate, burst
// and retry budget are its part of the usable totals in proportion to its
// permits. The hash leaves the generation out, so only a change of content
// is published.
func (p Plan) Document(gate, downstream string, generation int64, div Division) plan.Document {
	base := p.Result.ShareFor(div.Base)
	d := plan.Document{
		Version:               plan.CurrentVersion,
		Gate:                  gate,
		Downstream:            downstream,
		Generation:            generation,
		Epoch:                 div.Epoch,
		Revision:              div.Revision,
		MaxQueueWaitSeconds:   base.MaxQueueWait.Seconds(),
		AcquireTimeoutSeconds: base.AcquireTimeout.Seconds(),
		LatencySeconds:        p.Input.Latency.Seconds(),
		DeadlineSeconds:       p.Input.Deadline.Seconds(),
	}.WithShare(base.PodShare)
	if len(div.Pods) > 0 {
		d.Pods = make(map[string]plan.PodShare, len(div.Pods))
		for pod, permits := range div.Pods {
			d.Pods[pod] = p.Result.ShareFor(permits).PodShare
		}
	}
	d.Hash = plan.Hash(d)
	return d
}
