package controller

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// Event reasons and actions. Reasons of conditions double as event reasons
// for the findings that have one (ConfigMapConflict).
const (
	// EventReasonPlanChanged is a Normal event: the published plan changed.
	EventReasonPlanChanged = "PlanChanged"
	// EventActionPublish is the action of the controller's events.
	EventActionPublish = "Publish"
)

// planFigures are the numbers an event about a plan quotes.
type planFigures struct {
	// permits is the base share; extra pods hold one more.
	permits int32
	extra   int32
	usable  int32
	divisor int32
	source  v1alpha1.DivisorSource
}

// planChange is a change of the published plan's arithmetic.
type planChange struct {
	// before is nil on the first publication.
	before    *planFigures
	after     planFigures
	configMap string
}

// since returns the change from the status prev had, or nil when prev
// already published this division's arithmetic to the same ConfigMap. The
// steps of a handover change the published document but not its
// arithmetic, and raise no event. The figures before are prev's when it
// published a plan.
func (c planChange) since(prev *v1alpha1.DownstreamQuotaStatus) *planChange {
	published := prev.ConfigMap
	c.before = nil
	if published != nil && prev.PerPod != nil && prev.Replicas != nil && prev.Division != nil {
		c.before = &planFigures{
			permits: prev.PerPod.Permits, extra: prev.Division.Extra, usable: prev.Division.Usable,
			divisor: prev.Replicas.Divisor, source: prev.Replicas.DivisorSource,
		}
		if *c.before == c.after && published.Name == c.configMap {
			return nil
		}
	}
	return &c
}

// message states the change with its arithmetic, for example
// "permits 5→4 per pod, 5 for 4 of them: Ready pods 8→9; 40 usable permits
// = 4 × 9 + 4".
func (c planChange) message() string {
	a := c.after
	permits := fmt.Sprintf("permits %d per pod", a.permits)
	pods := fmt.Sprintf("%s %d", divisorSourceText(a.source), a.divisor)
	if b := c.before; b != nil {
		if b.permits != a.permits {
			permits = fmt.Sprintf("permits %d→%d per pod", b.permits, a.permits)
		}
		if b.divisor != a.divisor {
			pods = fmt.Sprintf("%s %d→%d", divisorSourceText(a.source), b.divisor, a.divisor)
		}
	}
	if a.extra > 0 {
		permits += fmt.Sprintf(", %d for %d of them", a.permits+1, a.extra)
	}
	msg := fmt.Sprintf("%s: %s; %s", permits, pods, sizingDivision(a.usable, a.divisor, a.permits, a.extra).Equation())
	if c.before == nil {
		msg += "; published to ConfigMap " + c.configMap
	}
	return msg
}

// attentionFindings are the findings that need a person: the workload is
// missing, or the contract cannot be kept as it stands (too small for the
// pods, raised above itself by AtLeastOne, or handed out twice by quotas
// that do not share it). Each raises one Warning event, with its reason,
// when it appears.
var attentionFindings = []string{
	v1alpha1.ReasonWorkloadNotFound,
	v1alpha1.ReasonQuotaTooSmall,
	v1alpha1.ReasonOvercommitted,
	v1alpha1.ReasonContractOversubscribed,
}

// findings returns the findings a status reports: the Ready condition's
// reason when it is False, and the reasons of status.diagnostics.
func findings(st *v1alpha1.DownstreamQuotaStatus) []string {
	reasons := diagnosticReasons(st.Diagnostics)
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
		reasons = append(reasons, c.Reason)
	}
	return reasons
}

// warnOnFindings records a Warning event about q for each finding of
// attentionFindings that status reports and prev did not: once when the
// finding appears, not on every status write while it stays, however its
// numbers move; again only after it went away and came back. The note is
// the finding's diagnostic message, with its arithmetic, or else the Ready
// condition's message.
func (p *Publisher) warnOnFindings(q *v1alpha1.DownstreamQuota, prev, status *v1alpha1.DownstreamQuotaStatus) {
	before, now := findings(prev), findings(status)
	for _, reason := range attentionFindings {
		if !slices.Contains(now, reason) || slices.Contains(before, reason) {
			continue
		}
		note := ""
		if d, ok := findDiagnostic(status.Diagnostics, reason); ok {
			note = d.Message
		} else if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionReady); c != nil {
			note = c.Message
		}
		p.recorder.Eventf(q, nil, corev1.EventTypeWarning, reason, EventActionPublish, "%s", note)
	}
}

// warnOnChange records a Warning event about q with the condition's reason
// and message when status has the condition of type with reason and prev
// did not have it with the same status, reason and message.
func (p *Publisher) warnOnChange(q *v1alpha1.DownstreamQuota, prev, status *v1alpha1.DownstreamQuotaStatus, typ, reason string) {
	if c := meta.FindStatusCondition(status.Conditions, typ); c != nil && c.Reason == reason && !sameCondition(prev.Conditions, *c) {
		p.recorder.Eventf(q, nil, corev1.EventTypeWarning, reason, EventActionPublish, "%s", c.Message)
	}
}

// announce records the events a quota's status write calls for, judged
// against prev, the status the API server had before it: the Warning
// events of its findings, a stalled handover and a ConfigMap conflict, and
// the Normal event PlanChanged when change, the change of the published
// plan's arithmetic, differs from what prev published.
func (p *Publisher) announce(q *v1alpha1.DownstreamQuota, prev, status *v1alpha1.DownstreamQuotaStatus, change *planChange) {
	p.warnOnChange(q, prev, status, v1alpha1.ConditionReady, v1alpha1.ReasonConfigMapConflict)
	p.warnOnChange(q, prev, status, v1alpha1.ConditionReady, v1alpha1.ReasonDivisionTooLarge)
	p.warnOnFindings(q, prev, status)
	if change != nil {
		// Each plan change is its own event with its own numbers: events
		// about an object aggregate by its reference, and q now carries
		// the new resourceVersion.
		if c := change.since(prev); c != nil {
			p.recorder.Eventf(q, nil, corev1.EventTypeNormal, EventReasonPlanChanged, EventActionPublish, "%s", c.message())
		}
	}
	p.warnOnChange(q, prev, status, v1alpha1.ConditionHandedOver, v1alpha1.ReasonHandoverStalled)
}
