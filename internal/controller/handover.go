package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/handover"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// Defaults of spec.handover.
const (
	// DefaultUnacknowledgedDelay covers the kubelet's refresh of a mounted
	// ConfigMap (its sync period and its cache's time to live, a minute each
	// by default) and a call's deadline.
	DefaultUnacknowledgedDelay = 150 * time.Second
	// DefaultStalledAfter is how long an acknowledging pod may take to
	// acknowledge a smaller share before the handover is reported stalled.
	DefaultStalledAfter = 30 * time.Second
)

// handoverSettings returns spec.handover with its defaults.
func handoverSettings(h v1alpha1.Handover) (unacknowledged, stalled time.Duration) {
	unacknowledged, stalled = DefaultUnacknowledgedDelay, DefaultStalledAfter
	if h.UnacknowledgedDelay != nil {
		unacknowledged = h.UnacknowledgedDelay.Duration
	}
	if h.StalledAfter != nil {
		stalled = h.StalledAfter.Duration
	}
	return unacknowledged, stalled
}

// member is one pod of a division as the handover sees it.
type member struct {
	key     string
	serving bool
	leaving bool
	ack     plan.Ack
	acked   bool // ack parsed and of this division's epoch
}

// membersOf returns the pods of a caller that take part in its division, by
// name: every pod that exists and has not finished. The acknowledgement is
// the pod's applied annotation for gate, when it is of epoch.
func membersOf(pods []corev1.Pod, gate, epoch string) []member {
	key := appliedAnnotation(gate)
	out := make([]member, 0, len(pods))
	for i := range pods {
		pod := &pods[i]
		if podFinished(pod) {
			continue
		}
		m := member{key: pod.Name, serving: podServing(pod), leaving: podLeaving(pod)}
		if v, ok := pod.Annotations[key]; ok {
			if a, err := plan.ParseAck(v); err == nil && a.Epoch == epoch {
				m.ack, m.acked = a, true
			}
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b member) int { return cmp.Compare(a.key, b.key) })
	return out
}

// caller is one caller of a division: its usable permits and its pods.
type caller struct {
	// prefix is prepended to the pods' names to key them in the division:
	// "" for a quota's own division, "<namespace>/" in a shared contract.
	prefix string
	// total is the caller's usable permits.
	total   int64
	members []member
}

// handoverStep is the outcome of one step of a division.
type handoverStep struct {
	// status is the new division status: the record every pod's share is
	// published from.
	status *v1alpha1.DivisionStatus
	// callers are the parts of status per caller, aligned with the callers
	// divide was given, with the pods' names without prefix.
	callers []*v1alpha1.DivisionStatus
	// changed is set when status differs from the previous record in what
	// a pod is told or may hold, so it must be written before publishing.
	changed bool
	// told maps each pod told a share, by key, to its permits.
	told map[string]int
	// waiting names the serving pods below their target.
	waiting []string
	// pending names the pods that may still hold more than they are told.
	pending []string
	// stalled names the pending pods that acknowledge plans but have not
	// acknowledged their smaller share within stalledAfter.
	stalled []string
	// recheck is when, if positive, a step should run again although no
	// watch fires: a delay or a stall deadline passes.
	recheck time.Duration
}

// divide runs one handover step of a division over callers, from the
// record prev (nil or of another epoch: nothing is held), at now. Every
// caller's part is divided exactly over its serving pods; the handover runs
// over all of them against the sum of the parts.
func divide(callers []caller, prev *v1alpha1.DivisionStatus, epoch string, h v1alpha1.Handover, now time.Time) handoverStep {
	unacknowledged, stalledAfter := handoverSettings(h)
	records := map[string]v1alpha1.PodShareStatus{}
	var revision int64
	if prev != nil && prev.Epoch == epoch {
		revision = prev.Revision
		for _, p := range prev.Pods {
			records[p.Name] = p
		}
	}

	var (
		keys    []string
		members []member
		targets []int64
		owner   []int // caller index of each member
		total   int64
	)
	for ci, c := range callers {
		total += c.total
		in := make([]division.Member, len(c.members))
		for i, m := range c.members {
			in[i] = division.Member{Key: m.key, Serving: m.serving, Told: int64(records[c.prefix+m.key].Permits)}
		}
		targets = append(targets, division.Targets(c.total, in)...)
		for _, m := range c.members {
			keys, members, owner = append(keys, c.prefix+m.key), append(members, m), append(owner, ci)
		}
	}

	in := handover.Input{Total: total, Revision: revision, Now: now, UnacknowledgedDelay: unacknowledged, Pods: make([]handover.Pod, len(members))}
	for i, m := range members {
		p := handover.Pod{Key: keys[i], Target: targets[i], Leaving: m.leaving, Record: recordOf(records[keys[i]])}
		if m.acked {
			p.Acked, p.Released = m.ack.Revision, m.ack.Released
		}
		in.Pods[i] = p
	}
	res := handover.Step(in)

	out := handoverStep{told: map[string]int{}, recheck: res.RecheckAfter}
	entries := make([]*v1alpha1.PodShareStatus, len(members))
	for i, m := range members {
		r := res.Records[i]
		if r.Told > 0 {
			out.told[keys[i]] = int(r.Told)
		}
		if m.serving && r.Told < targets[i] {
			out.waiting = append(out.waiting, keys[i])
		}
		if r.Told == 0 && r.Holds == 0 && targets[i] == 0 {
			continue
		}
		ps := &v1alpha1.PodShareStatus{Name: keys[i], Permits: int32(r.Told)}
		if targets[i] != r.Told && !m.leaving {
			ps.Target = ptr.To(int32(targets[i]))
		}
		if r.Holds > r.Told {
			ps.Holds = ptr.To(int32(r.Holds))
			ps.ShrunkAtRevision = r.ShrunkAt
			t := metav1.NewMicroTime(r.ShrunkTime)
			ps.ShrunkAt = &t
			out.pending = append(out.pending, keys[i])
			// A pod that does not acknowledge is settled by time, and
			// handover.Step says when (res.RecheckAfter).
			if m.acked && !m.ack.Released {
				if wait := r.ShrunkTime.Add(stalledAfter).Sub(now); wait <= 0 {
					out.stalled = append(out.stalled, keys[i])
				} else {
					out.recheck = handover.Sooner(out.recheck, wait)
				}
			}
		}
		entries[i] = ps
	}

	summary := func(idx []int, part int64, trim string) *v1alpha1.DivisionStatus {
		st := &v1alpha1.DivisionStatus{Epoch: epoch, Revision: res.Revision, Usable: int32(part)}
		var serving int64
		shares := map[int32]int32{}
		for _, i := range idx {
			r := res.Records[i]
			if members[i].serving {
				serving++
			}
			if r.Told > 0 {
				st.HandedOut += int32(r.Told)
				shares[int32(r.Told)]++
			}
			st.Held += int32(r.Bound())
			if e := entries[i]; e != nil {
				e := *e
				e.Name = strings.TrimPrefix(e.Name, trim)
				st.Pods = append(st.Pods, e)
			}
		}
		if serving > 0 {
			st.Base, st.Extra = int32(part/serving), int32(part%serving)
		}
		for permits, pods := range shares {
			st.Shares = append(st.Shares, v1alpha1.ShareCount{Permits: permits, Pods: pods})
		}
		slices.SortFunc(st.Shares, func(a, b v1alpha1.ShareCount) int { return cmp.Compare(b.Permits, a.Permits) })
		slices.SortFunc(st.Pods, func(a, b v1alpha1.PodShareStatus) int { return cmp.Compare(a.Name, b.Name) })
		return st
	}
	all := make([]int, len(members))
	for i := range all {
		all[i] = i
	}
	out.status = summary(all, total, "")
	if len(callers) == 1 && callers[0].prefix == "" {
		// A quota's own division: its part is the whole.
		out.callers = []*v1alpha1.DivisionStatus{out.status}
	} else {
		for ci, c := range callers {
			var idx []int
			for i := range members {
				if owner[i] == ci {
					idx = append(idx, i)
				}
			}
			out.callers = append(out.callers, summary(idx, c.total, c.prefix))
		}
	}
	out.changed = prev == nil || prev.Epoch != epoch || prev.Revision != out.status.Revision || !sameRecords(prev.Pods, out.status.Pods)
	return out
}

// forCaller returns the step as one caller sees it: its part of the
// division, and the waiting, pending and stalled pods that are its own, by
// name without prefix.
func (h handoverStep) forCaller(i int, prefix string) handoverStep {
	own := func(keys []string) []string {
		var out []string
		for _, k := range keys {
			if name, ok := strings.CutPrefix(k, prefix); ok {
				out = append(out, name)
			}
		}
		return out
	}
	c := h
	c.status = h.callers[i]
	c.waiting, c.pending, c.stalled = own(h.waiting), own(h.pending), own(h.stalled)
	return c
}

// toldFor returns the shares of the pods whose keys start with prefix, by
// name without it: one caller's document.
func (h handoverStep) toldFor(prefix string) map[string]int {
	if prefix == "" {
		return h.told
	}
	out := map[string]int{}
	for key, permits := range h.told {
		if name, ok := strings.CutPrefix(key, prefix); ok {
			out[name] = permits
		}
	}
	return out
}

// recordOf converts a pod's status entry to its handover record.
func recordOf(p v1alpha1.PodShareStatus) handover.Record {
	r := handover.Record{Told: int64(p.Permits), Holds: int64(p.Permits)}
	if p.Holds != nil && int64(*p.Holds) > r.Told {
		r.Holds, r.ShrunkAt = int64(*p.Holds), p.ShrunkAtRevision
		if p.ShrunkAt != nil {
			r.ShrunkTime = p.ShrunkAt.Time
		}
	}
	return r
}

// sameRecords reports whether two lists of pod entries record the same
// shares and holds; targets, which are recomputed every step, do not count.
func sameRecords(a, b []v1alpha1.PodShareStatus) bool {
	return slices.EqualFunc(a, b, func(x, y v1alpha1.PodShareStatus) bool {
		return x.Name == y.Name && x.Permits == y.Permits && ptr.Equal(x.Holds, y.Holds) && x.ShrunkAtRevision == y.ShrunkAtRevision
	})
}

// usableTotal is what a caller's division hands out: the plan's usable
// permits, or one per serving pod when AtLeastOne raised them.
func usableTotal(p quota.Sizing) int64 { return p.Result.TotalPermits }

// document returns one caller's part of the division as a published
// document's division: pods not named hold nothing.
func (h handoverStep) document(prefix string) quota.Shares {
	return quota.Shares{Epoch: h.status.Epoch, Revision: h.status.Revision, Pods: h.toldFor(prefix)}
}

// handedOverCondition says whether the handover is done, in progress or
// stalled.
func handedOverCondition(h handoverStep) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionHandedOver, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonHandedOver}
	st := h.status
	switch {
	case len(h.stalled) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonHandoverStalled
		c.Message = fmt.Sprintf("pods %s have not acknowledged their smaller share; their old share stays counted, so %s wait for it",
			podList(h.stalled), waitingText(h.waiting))
	case len(h.waiting) > 0 || len(h.pending) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonHandoverInProgress
		c.Message = fmt.Sprintf("%d of %d permits handed out, %d held; %s wait for pods %s to let go of capacity",
			st.HandedOut, st.Usable, st.Held, waitingText(h.waiting), podList(h.pending))
	default:
		c.Message = fmt.Sprintf("%d of %d permits handed out to the Ready pods at revision %d", st.HandedOut, st.Usable, st.Revision)
	}
	return c
}

func waitingText(waiting []string) string {
	if len(waiting) == 0 {
		return "no pods"
	}
	return "pods " + podList(waiting)
}

// podList lists up to maxPending names, and how many more.
func podList(list []string) string {
	if len(list) <= maxPending {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:maxPending], ", "), len(list)-maxPending)
}
