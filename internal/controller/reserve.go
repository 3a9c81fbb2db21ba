package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// reserve is a quota's spec.reserve as a reconcile reads it: the permit
// server's Deployment and pods, and the permits kept out of the division
// over the workload's pods.
//
// The broker's pods are members of the quota's caller like the workload's
// pods, keyed the same way, so the handover moves their slices as it moves
// a pod's share: a replica told a smaller slice keeps its larger one
// counted until it acknowledges (or the unacknowledged delay passes), and a
// replica that leaves stays counted until it let go. The published
// document names each replica with its slice.
//
// While no replica is Ready (the Deployment is missing, or starting) the
// reserve is held by nobody rather than given to the workload's pods:
// otherwise every replica that turns Ready would wait for a handover from
// every pod (up to the unacknowledged delay for pods that do not
// acknowledge), and a broker that restarts would move permits through
// every pod twice.
type reserve struct {
	// broker names the Deployment.
	broker string
	// found is set when the Deployment exists.
	found bool
	// pods are the Deployment's pods that are not the workload's.
	pods []corev1.Pod
	// requested is what spec.reserve.permits asks for; permits is that cut
	// to leave every serving pod of the workload one permit.
	requested, permits int64
	// serving counts the workload's serving pods; ready the broker's.
	serving, ready int64
	spec           intstr.IntOrString
}

// size sets the reserve's size out of total usable permits: a count, or a
// percentage of total rounded down, cut to leave every serving pod of the
// workload one permit; and keeps it out of c's pods' division.
func (r *reserve) size(c *caller, total int64) {
	asked, err := intstr.GetScaledValueFromIntOrPercent(&r.spec, int(min(total, 1<<30)), false)
	if err != nil {
		asked = 0 // readReserve refused it
	}
	r.requested = int64(max(asked, 0))
	r.permits = max(min(r.requested, total-r.serving), 0)
	c.reserve = r.permits
}

// readReserve reads the reserve of q, whose workload's pods are
// callerPods; nil when q asks for none. Its size is set by size, once the
// quota's usable permits are known.
func readReserve(ctx context.Context, c client.Reader, q *v1alpha1.DownstreamQuota, callerPods []corev1.Pod) (*reserve, error) {
	spec := q.Spec.Reserve
	if spec == nil {
		return nil, nil
	}
	if _, err := intstr.GetScaledValueFromIntOrPercent(&spec.Permits, 0, false); err != nil || (spec.Permits.Type == intstr.Int && spec.Permits.IntVal < 0) {
		return nil, &quota.FieldError{Field: "spec.reserve.permits", Detail: fmt.Sprintf("must be a count of at least 0 or a percentage, got %q", spec.Permits.String())}
	}
	r := &reserve{broker: spec.BrokerRef.Name, spec: spec.Permits}
	own := map[string]bool{}
	for i := range callerPods {
		own[callerPods[i].Name] = true
		if podServing(&callerPods[i]) {
			r.serving++
		}
	}
	key := client.ObjectKey{Namespace: q.Namespace, Name: r.broker}
	var d appsv1.Deployment
	if err := c.Get(ctx, key, &d); err != nil {
		return r, ignoreNotFound(err, "deployment %s", key)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("controller: Deployment %s: selector: %w", key, err)
	}
	r.found = true
	if sel.Empty() {
		return r, nil
	}
	pods, err := listPods(ctx, c, q.Namespace, sel)
	if err != nil {
		return nil, err
	}
	// A pod both selectors match is the workload's: it calls the
	// downstream, and a member is keyed once.
	r.pods = slices.DeleteFunc(pods, func(p corev1.Pod) bool { return own[p.Name] })
	for i := range r.pods {
		if podServing(&r.pods[i]) {
			r.ready++
		}
	}
	return r, nil
}

// join makes the broker's pods members of c, the quota's caller in a
// division of epoch, and keeps the reserve out of its pods' part. before is
// the quota's status.reserve, whose replicas are known as lenders when only
// the division's record still names them.
func (r *reserve) join(c *caller, epoch string, before *v1alpha1.ReserveStatus) {
	c.lenders = map[string]bool{}
	if before != nil {
		for _, p := range before.Replicas {
			c.lenders[p.Name] = true
		}
	}
	ms := membersOf(r.pods, c.prefix, c.gate, epoch)
	for _, m := range ms {
		c.lenders[m.name] = true
	}
	c.members = append(c.members, ms...)
	slices.SortFunc(c.members, func(a, b member) int { return strings.Compare(a.key, b.key) })
}

// targets returns the target of each of c's members, aligned with in (its
// members as the division sees them): the reserve divided exactly over the
// serving broker replicas, the rest over the serving pods, equally or, when
// c has demand, by it (previous maps a pod's key to its previous target).
func (c *caller) targets(in []division.Member, previous map[string]int64) []int64 {
	if len(c.lenders) == 0 && c.reserve == 0 {
		return c.podTargets(c.total, in, previous)
	}
	var (
		pods, lenders []division.Member
		pi, li        []int
	)
	for i, m := range c.members {
		if c.lenders[m.name] {
			lenders, li = append(lenders, in[i]), append(li, i)
		} else {
			pods, pi = append(pods, in[i]), append(pi, i)
		}
	}
	held := c.held()
	out := make([]int64, len(in))
	for j, t := range c.podTargets(c.total-held, pods, previous) {
		out[pi[j]] = t
	}
	for j, t := range division.Targets(held, lenders) {
		out[li[j]] = t
	}
	return out
}

// podTargets divides part over the workload's pods in: by their demand
// when c follows it, equally otherwise.
func (c *caller) podTargets(part int64, in []division.Member, previous map[string]int64) []int64 {
	if c.demand != nil {
		return c.followTargets(part, in, previous)
	}
	return division.Targets(part, in)
}

// shares returns what c's document publishes of its part cs of a step:
// with a reserve, the broker's replicas and the reserve permits they are
// told, so that each pod's waiting room counts the permits that can serve
// its waiters (sizing.Result.ShareWithReserve). The reserve counted is
// what the replicas are told, not spec.reserve: while none is Ready, or
// a replica's slice is being handed over, no one lends the rest, and the
// pods' rooms count only what can be lent.
func (c *caller) shares(cs callerStep) quota.Shares {
	s := cs.shares()
	if len(c.lenders) == 0 {
		return s
	}
	s.Lenders = c.lenders
	for name, n := range cs.told {
		if c.lenders[name] {
			s.Reserve += n
		}
	}
	return s
}

// held is the part of c's usable permits kept out of its pods' division.
func (c *caller) held() int64 { return max(min(c.reserve, c.total), 0) }

// isLender reports whether m is one of c's broker replicas.
func (c *caller) isLender(m member) bool { return c.lenders[m.name] }

// reserveOf sums the reserves of the callers of the entries idx.
func reserveOf(d *divisionInput, entries []stepEntry, idx []int) int64 {
	seen := map[int]bool{}
	var sum int64
	for _, i := range idx {
		if ci := entries[i].c; !seen[ci] {
			seen[ci] = true
			sum += d.callers[ci].held()
		}
	}
	return sum
}

// reserveStatus returns where r went in a step of which st is the quota's
// part: the replicas st lists, with their slices.
func (r *reserve) status(c *caller, st *v1alpha1.DivisionStatus) *v1alpha1.ReserveStatus {
	out := &v1alpha1.ReserveStatus{Broker: r.broker, Requested: int32(r.requested), Permits: int32(r.permits)}
	for _, p := range st.Pods {
		if c.lenders[p.Name] {
			out.Replicas = append(out.Replicas, p)
			out.HandedOut += p.Permits
		}
	}
	return out
}

// condition is the Reserved condition of r as the step left it.
func (r *reserve) condition(st *v1alpha1.ReserveStatus) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionReserved, Status: metav1.ConditionFalse}
	switch {
	case !r.found:
		c.Reason = v1alpha1.ReasonBrokerNotFound
		c.Message = fmt.Sprintf("Deployment %s (spec.reserve.brokerRef) not found; the reserve of %d permits is held by nobody until one of its pods is Ready", r.broker, r.permits)
	case r.ready == 0:
		c.Reason = v1alpha1.ReasonNoReadyBroker
		c.Message = fmt.Sprintf("Deployment %s has no Ready pod; the reserve of %d permits is held by nobody until one is", r.broker, r.permits)
	case r.permits < r.requested:
		c.Reason = v1alpha1.ReasonReserveTooLarge
		c.Message = fmt.Sprintf("spec.reserve.permits asks for %d permits, which would leave some of the %d Ready pods without a permit of their own; the reserve is cut to %d, %d permits handed out to %d Ready replicas of Deployment %s",
			r.requested, r.serving, r.permits, st.HandedOut, r.ready, r.broker)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonReserveHeld
		c.Message = fmt.Sprintf("reserve of %d permits: %d handed out to %d Ready replicas of Deployment %s", r.permits, st.HandedOut, r.ready, r.broker)
	}
	return c
}

// noReserve is the Reserved condition of a quota that asks for no reserve
// but had one: its pods hold every usable permit. A quota that never had
// one gets none.
func noReserve(conds []metav1.Condition) *metav1.Condition {
	if meta.FindStatusCondition(conds, v1alpha1.ConditionReserved) == nil {
		return nil
	}
	return &metav1.Condition{Type: v1alpha1.ConditionReserved, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoReserve,
		Message: "spec.reserve is not set; the pods hold every usable permit"}
}

// reportReserve puts where the reserve r went (nil: none asked) in the
// status and readiness of part, after its step: status.reserve, the
// Reserved condition, and the pods' own share in status.perPod.
func (part *quotaPart) reportReserve(r *reserve) {
	if r == nil {
		part.status.Reserve = nil
		part.in.reservedCondition = noReserve(part.quota.Status.Conditions)
		return
	}
	st := part.status.Division
	if st == nil {
		return
	}
	part.status.Reserve = r.status(part.caller, st)
	c := r.condition(part.status.Reserve)
	part.in.reserved, part.in.reservedCondition = int32(part.caller.held()), &c
	if part.status.PerPod != nil {
		// The plan was sized over all usable permits; the pods' own
		// share is of what the reserve leaves them, and their waiting
		// room counts the reserve the document counts.
		part.status.PerPod.Permits = st.Base
		part.in.permits = st.Base
		if part.plan != nil {
			room := part.plan.Result.ShareWithReserve(int(st.Base), part.shares.Reserve).QueueCapacity
			part.status.PerPod.QueueCapacity = int32(room)
		}
	}
}
