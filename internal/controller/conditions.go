package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// blockingDiagnostics are the plan's findings that make Ready False, most
// important first: the published plan cannot keep the contract or the
// deadline.
var blockingDiagnostics = []string{
	v1alpha1.ReasonContractOversubscribed,
	v1alpha1.ReasonQuotaTooSmall,
	v1alpha1.ReasonOvercommitted,
	v1alpha1.ReasonUnacknowledgedDelayTooShort,
	v1alpha1.ReasonDeadlineBelowLatency,
}

// warningDiagnostics are findings that become Ready's reason while Ready
// stays True: the plan holds, but part of the demand will be shed.
var warningDiagnostics = []string{
	v1alpha1.ReasonDemandExceedsQuota,
}

// readiness is what the Ready condition is computed from.
type readiness struct {
	workload v1alpha1.WorkloadReference
	// workloadMissing: the workload does not exist.
	workloadMissing bool
	// invalid is why the spec gives no plan, if it does not.
	invalid error
	// conflict is why the target ConfigMap is not the operator's, if it is
	// not.
	conflict string
	// tooLarge is why the division's record or document does not fit
	// within the API server's limits, if it does not.
	tooLarge string
	// missingHPA names the HPA spec.hpaName names when it does not exist.
	missingHPA string
	// published is where the current plan was published; nil when it was
	// not.
	published *v1alpha1.PublishedConfigMap
	replicas  *v1alpha1.ReplicaStatus
	permits   int32
	// diagnostics are the plan's findings.
	diagnostics []v1alpha1.Diagnostic
	// handover is the quota's part of the division's step; nil when no
	// plan was computed.
	handover *callerStep
	// applied is how far the Ready pods are in applying the plan published
	// by this reconcile; nil when it published none.
	applied *appliedCount
	// reserved is the reserve kept out of the pods' division, and
	// reservedCondition its Reserved condition; nil when there is none to
	// report (see reserve.go).
	reserved          int32
	reservedCondition *metav1.Condition
	// demandCondition is the DemandFollowing condition; nil when there is
	// none to report (see demand.go).
	demandCondition *metav1.Condition
}

// conditions returns the conditions a reconcile writes: Ready, PlanApplied,
// and HandedOver once a division was stepped.
func (in readiness) conditions() []metav1.Condition {
	ready := readyCondition(in)
	conds := []metav1.Condition{ready, planAppliedCondition(in.applied, ready)}
	if in.handover != nil {
		conds = append(conds, in.handover.condition())
	}
	if in.reservedCondition != nil {
		conds = append(conds, *in.reservedCondition)
	}
	if in.demandCondition != nil {
		conds = append(conds, *in.demandCondition)
	}
	return conds
}

// readyCondition computes the Ready condition (without its transition time
// and observed generation). The reason is the most important finding, in
// the order the package documentation lists; the message says what it means
// for the published plan and names the other findings.
func readyCondition(in readiness) metav1.Condition {
	notReady := func(reason, message string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	}
	switch {
	case in.workloadMissing:
		msg := fmt.Sprintf("%s %s not found; a plan is published once it exists", in.workload.Kind, in.workload.Name)
		if in.published != nil {
			msg += fmt.Sprintf("; the last plan stays in ConfigMap %s", in.published.Name)
		}
		return notReady(v1alpha1.ReasonWorkloadNotFound, msg)
	case in.invalid != nil:
		return notReady(v1alpha1.ReasonInvalidSpec, in.invalid.Error()+"; no plan computed")
	case in.conflict != "":
		return notReady(v1alpha1.ReasonConfigMapConflict, in.conflict+"; it was left untouched and the plan is not published")
	case in.tooLarge != "":
		return notReady(v1alpha1.ReasonDivisionTooLarge, in.tooLarge+"; nothing new is published, and the pods keep the last plan that was")
	}

	where := "not published"
	if in.published != nil {
		where = "published to ConfigMap " + in.published.Name
	}
	var replicas v1alpha1.ReplicaStatus
	if in.replicas != nil {
		replicas = *in.replicas
	}
	summary := fmt.Sprintf("permits %d per pod over divisor %d (%s), %s",
		in.permits, replicas.Divisor, replicas.DivisorSource, where)
	if h := in.handover; h != nil {
		summary = fmt.Sprintf("%s %d; %s, %s",
			divisorSourceText(replicas.DivisorSource), replicas.Divisor, sizingDivision(h.status.Usable-in.reserved, replicas.Divisor, h.status.Base, h.status.Extra).Equation(), where)
	}
	reasons := diagnosticReasons(in.diagnostics)
	others := func(except string) string {
		rest := slices.DeleteFunc(slices.Clone(reasons), func(r string) bool { return r == except })
		if len(rest) == 0 {
			return ""
		}
		return "; other findings: " + strings.Join(rest, ", ") + " (see status.diagnostics)"
	}
	if in.missingHPA != "" {
		return notReady(v1alpha1.ReasonHPANotFound,
			fmt.Sprintf("HorizontalPodAutoscaler %s not found; %s", in.missingHPA, summary)+others(""))
	}
	for _, reason := range blockingDiagnostics {
		if d, ok := findDiagnostic(in.diagnostics, reason); ok {
			return notReady(reason, d.Message+"; "+summary+others(reason))
		}
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished}
	for _, reason := range warningDiagnostics {
		if d, ok := findDiagnostic(in.diagnostics, reason); ok {
			ready.Reason, ready.Message = reason, d.Message+"; "+summary+others(reason)
			return ready
		}
	}
	ready.Message = strings.ToUpper(summary[:1]) + summary[1:] + others("")
	return ready
}

// sizingDivision states a division as sizing does, so that the Ready
// condition, the events and kubectl-backpressure quote one equation: usable
// permits over pods, base permits each and extra pods with one more.
// AtLeastOne raised every pod to one permit exactly when the shares add up
// to more than the usable permits.
func sizingDivision(usable, pods, base, extra int32) division.Even {
	return division.Even{
		Usable: int64(usable), Pods: int64(pods), Base: int64(base), Extra: int64(extra),
		RaisedToOne: int64(base)*int64(pods)+int64(extra) > int64(usable),
	}
}

func findDiagnostic(diags []v1alpha1.Diagnostic, reason string) (v1alpha1.Diagnostic, bool) {
	i := slices.IndexFunc(diags, func(d v1alpha1.Diagnostic) bool { return d.Reason == reason })
	if i < 0 {
		return v1alpha1.Diagnostic{}, false
	}
	return diags[i], true
}

// diagnosticReasons lists the distinct reasons of diags in their order.
func diagnosticReasons(diags []v1alpha1.Diagnostic) []string {
	var reasons []string
	for _, d := range diags {
		if !slices.Contains(reasons, d.Reason) {
			reasons = append(reasons, d.Reason)
		}
	}
	return reasons
}

// setCondition sets c in conds for generation at time now. The transition
// time moves only when the status flips, as meta.SetStatusCondition does;
// it is cut to seconds, as the API server stores it.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, generation int64, now time.Time) {
	c.ObservedGeneration = generation
	c.LastTransitionTime = metav1.NewTime(now).Rfc3339Copy()
	meta.SetStatusCondition(conds, c)
}

// appliedCount is how far the Ready, non-terminating pods of a quota are in
// applying one published plan revision.
type appliedCount struct {
	// annotation is the pods' applied annotation for the quota.
	annotation string
	revision   int64
	// ready counts the pods that are Ready and not terminating.
	ready int
	// applied counts those that acknowledged the revision or a newer one.
	applied int
	// behind names those that acknowledged an earlier revision of the
	// plan's epoch (or released it), in name order.
	behind []string
	// silent names those with no acknowledgement of the plan's epoch at
	// all, in name order.
	silent []string
}

// countApplied counts the serving pods (Ready, neither terminating nor
// finished) that acknowledged current through their applied annotation for
// gate. Pods that are starting or terminating serve no traffic: a starting
// pod reads the newest plan when it turns Ready, and a terminating pod's
// share is the handover's concern (condition HandedOver).
func countApplied(pods []corev1.Pod, gate string, current plan.Ack) *appliedCount {
	a := &appliedCount{annotation: appliedAnnotation(gate), revision: current.Revision}
	for i := range pods {
		pod := &pods[i]
		if !podServing(pod) {
			continue
		}
		a.ready++
		ack, err := plan.ParseAck(pod.Annotations[a.annotation])
		switch {
		case err != nil || ack.Epoch != current.Epoch:
			a.silent = append(a.silent, pod.Name)
		case !ack.Released && ack.Revision >= current.Revision:
			a.applied++
		default:
			a.behind = append(a.behind, pod.Name)
		}
	}
	slices.Sort(a.behind)
	slices.Sort(a.silent)
	return a
}

// text is status.podsApplied: "<applied>/<ready>".
func (a *appliedCount) text() string { return fmt.Sprintf("%d/%d", a.applied, a.ready) }

// planAppliedCondition computes the PlanApplied condition from the count
// of the plan published by this reconcile, or from ready when none was.
// Pods without any acknowledgement come first in the reason: they never
// turn the condition True by themselves, while pods behind by a revision
// usually catch up within a call's latency.
func planAppliedCondition(a *appliedCount, ready metav1.Condition) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionPlanApplied, Status: metav1.ConditionFalse}
	if a == nil {
		c.Reason = v1alpha1.ReasonPlanNotPublished
		c.Message = fmt.Sprintf("the current plan is not published (Ready is %s: %s); pods keep the last plan they applied", ready.Status, ready.Reason)
		return c
	}
	head := fmt.Sprintf("%d of %d Ready pods applied revision %d", a.applied, a.ready, a.revision)
	behind := "; still at an earlier revision: " + podList(a.behind) +
		" (not yet reloaded, or calls in flight still above a smaller share)"
	switch {
	case a.ready == 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonNoReadyPods
		c.Message = fmt.Sprintf("no pod is Ready, so none enforces a plan older than revision %d", a.revision)
	case len(a.silent) > 0:
		c.Reason = v1alpha1.ReasonPodsNotAcknowledging
		c.Message = fmt.Sprintf("%s; no acknowledgement of this plan (annotation %s) from: %s; a pod whose runtime has acknowledgement off, or reads a mounted volume without an API client, never acknowledges and keeps this condition False; a pod that has just started acknowledges within moments",
			head, a.annotation, podList(a.silent))
		if len(a.behind) > 0 {
			c.Message += behind
		}
	case len(a.behind) > 0:
		c.Reason = v1alpha1.ReasonPodsPending
		c.Message = head + behind
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonAllPodsApplied
		c.Message = fmt.Sprintf("all %d Ready pods applied revision %d", a.ready, a.revision)
	}
	return c
}

// delayDiagnostic reports an unacknowledged delay shorter than the deadline
// a caller's calls are sized for: a pod that does not acknowledge may still
// have calls above its smaller share when the delay passes and its old
// share is handed to another pod.
func delayDiagnostic(h v1alpha1.Handover, deadline time.Duration) *v1alpha1.Diagnostic {
	delay, _ := handoverSettings(h)
	if delay >= deadline {
		return nil
	}
	return &v1alpha1.Diagnostic{
		Reason: v1alpha1.ReasonUnacknowledgedDelayTooShort,
		Message: fmt.Sprintf("spec.handover.unacknowledgedDelay %s is shorter than the deadline %s: a pod that does not acknowledge may still have calls above a smaller share when its old share is handed to another pod; make it at least the deadline, plus the kubelet's refresh of a mounted ConfigMap (about two minutes) for pods that read one (the default, %s, covers both)",
			delay, deadline, DefaultUnacknowledgedDelay),
	}
}
