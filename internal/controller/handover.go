package controller

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	// key is the pod's key in the division: its caller's prefix and its
	// name.
	key, name string
	serving   bool
	leaving   bool
	// departed is set for a pod that only the division's record still
	// names: its caller no longer lists it (it was relabelled, it is gone,
	// it belongs to a workload the quota no longer names), or its caller
	// left the division.
	departed bool
	// gone is set for a departed pod whose object is gone.
	gone bool
	ack  plan.Ack
	// acked is set when ack parsed and is of this division's epoch.
	acked    bool
	declared handover.Declaration
}

// declaration reads what a pod declared of its acknowledgements.
func declaration(pod *corev1.Pod) handover.Declaration {
	switch pod.Annotations[v1alpha1.AcknowledgesAnnotation] {
	case "true":
		return handover.DeclaredAcknowledging
	case "false":
		return handover.DeclaredSilent
	}
	return handover.Undeclared
}

// memberOf returns pod as a member of a caller keyed by prefix, whose
// acknowledgement annotation names gate, in a division of epoch.
func memberOf(pod *corev1.Pod, prefix, gate, epoch string) member {
	m := member{key: prefix + pod.Name, name: pod.Name, serving: podServing(pod), leaving: podLeaving(pod), declared: declaration(pod)}
	if v, ok := pod.Annotations[appliedAnnotation(gate)]; ok {
		if a, err := plan.ParseAck(v); err == nil && a.Epoch == epoch {
			m.ack, m.acked = a, true
		}
	}
	return m
}

// membersOf returns the pods of a caller that take part in its division, by
// name: every pod that exists and has not finished.
func membersOf(pods []corev1.Pod, prefix, gate, epoch string) []member {
	out := make([]member, 0, len(pods))
	for i := range pods {
		if !podFinished(&pods[i]) {
			out = append(out, memberOf(&pods[i], prefix, gate, epoch))
		}
	}
	slices.SortFunc(out, func(a, b member) int { return cmp.Compare(a.key, b.key) })
	return out
}

// caller is one caller of a division: a quota, its usable part and its
// pods, and what its pods can read.
type caller struct {
	// namespace and gate are the quota's: the pods' acknowledgement
	// annotation names the gate.
	namespace, gate string
	// prefix is prepended to the pods' names to key them in the division:
	// "" for a quota's own division, "<namespace>/<quota>/" in a shared
	// contract.
	prefix string
	// total is the caller's usable permits; 0 for a caller that departs.
	total   int64
	members []member
	// published is the newest revision of the division's epoch that the
	// ConfigMaps its pods read all hold; 0 when one holds none.
	published int64
	// revisions are the revisions of the division's epoch of the documents
	// its pods read.
	revisions []int64
	// own maps a pod's name to the most a document of the division's
	// epoch its pods read gives it, or says it may still hold: what a
	// fresh record starts from.
	own map[string]int64
	// learned maps a pod's name to the most a document of another epoch
	// its pods read gives it, or says it may still hold, and, while they
	// read it (elsewhere), what a record of another epoch says it may hold.
	learned map[string]int64
	// elsewhere is set while the caller's pods read another epoch's
	// document: another division told them things since this one's record
	// was written, which holds of them only what they may hold.
	elsewhere bool
	// unreached is set for a caller whose documents the division no longer
	// writes: its quota is deleted, or divides elsewhere.
	unreached bool
	// reads maps a pod's name to what the document its pods read now
	// gives it; nil when they read none.
	reads map[string]int64
	// docs are the documents of its gate in the ConfigMaps its pods may
	// read, of any epoch.
	docs []plan.Document
	// reserve is the part of total kept out of the pods' division for the
	// permit server's replicas, lenders their names among members (see
	// reserve.join).
	reserve int64
	lenders map[string]bool
	// generation is the quota's metadata.generation, which its documents
	// carry; current is the document its pods read now (nil when none).
	generation int64
	current    *plan.Document
	// demand maps a pod's name to its measured demand in permits when the
	// pods' part follows demand (a pod not in it is not measured); nil
	// when it is divided equally. dwelling is set while the division moved
	// on demand less than demandDwell intervals ago; movedOnDemand once a
	// step moved it on demand (see Publisher.noteDemandMove).
	demand        map[string]int64
	dwelling      bool
	movedOnDemand bool
	// watch is what the demand watch needs of a caller whose pods' part
	// follows demand; nil otherwise (see Publisher.shareDemand).
	watch *followWatch
}

// outdated reports whether the document c's pods read now is revision rev
// of epoch but was made from another spec: another generation of the quota
// (its downstream, sizing or rate changed) or another unacknowledged
// delay. What is published now differs from it, and a runtime puts no
// revision in force twice (it keeps the one it has, and with it the old
// delay it lapses by), so the step needs a revision of its own. Once that
// is published the document is current again; while its publication
// fails the document is of an older revision, so a failing ConfigMap
// write never turns into a new revision at every step. A caller whose
// documents the division no longer writes has nothing to publish.
func (c *caller) outdated(epoch string, rev int64, delay time.Duration) bool {
	d := c.current
	return d != nil && !c.unreached && rev > 0 && d.Epoch == epoch && d.Revision == rev &&
		(d.Generation != c.generation || d.UnacknowledgedDelaySeconds != delay.Seconds())
}

// readDocument notes the document the caller's pods read now: a pod it
// does not name reads the base share.
func (c *caller) readDocument(d plan.Document, names []string) {
	c.current = &d
	c.reads = map[string]int64{}
	for _, name := range names {
		c.reads[name] = int64(d.For(name).Permits)
	}
	for name, s := range d.Pods {
		c.reads[name] = int64(s.Permits)
	}
}

// readable returns the most a document its pods may read gives the pod
// name: its entry, or the base share of a document that does not name it.
func (c *caller) readable(name string) int64 {
	var most int64
	for _, d := range c.docs {
		n := d.Permits
		if s, ok := d.Pods[name]; ok {
			n = s.Permits
		}
		most = max(most, int64(n))
	}
	return most
}

// learn notes in into that a document or record gives the pod name share.
func learn(into *map[string]int64, name string, share int64) {
	if share <= 0 {
		return
	}
	if *into == nil {
		*into = map[string]int64{}
	}
	(*into)[name] = max((*into)[name], share)
}

// learnDocument notes what a published document gives each pod it names,
// and what it says they may still hold, and its revision when it is of
// epoch.
func (c *caller) learnDocument(d plan.Document, epoch string) {
	into := &c.learned
	if d.Epoch == epoch {
		into = &c.own
		c.revisions = append(c.revisions, d.Revision)
	}
	for name, s := range d.Pods {
		learn(into, name, int64(s.Permits))
	}
	for name, n := range d.Holding {
		learn(into, name, int64(n))
	}
}

// learnRecord notes what a record of another epoch says the pods may hold,
// its names stripped of their own prefix.
func (c *caller) learnRecord(d *v1alpha1.DivisionStatus, epoch string) {
	if d == nil || d.Epoch == epoch {
		return
	}
	for key, r := range snapshotOf(d).Records {
		if i := strings.LastIndexByte(key, '/'); i >= 0 {
			key = key[i+1:]
		}
		learn(&c.learned, key, r.Bound())
	}
}

// division is one division's input: its callers and its record.
type divisionInput struct {
	// epoch is the UID of the object that owns the division.
	epoch    string
	handover v1alpha1.Handover
	// record is the division's record as read; nil when there is none.
	record *v1alpha1.DivisionStatus
	// callers are the division's callers; addDeparting adds those that
	// only its record still names.
	callers []*caller
	// shared is set for a shared contract's division, whose pods are keyed
	// by namespace and quota.
	shared bool
	now    time.Time
	// clock names this process's clock.
	clock string
}

// resume returns where the division's step starts from: its record read
// back, started afresh when it is missing or behind what the pods read and
// acknowledged, and every pod it does not know taken to hold what it may.
func resume(d *divisionInput) handover.Resumed {
	t := handover.Trace{Learned: map[string]int64{}, Own: map[string]int64{}, Reads: map[string]int64{}}
	for _, c := range d.callers {
		t.Elsewhere = t.Elsewhere || c.elsewhere
		t.Revisions = append(t.Revisions, c.revisions...)
		for _, m := range c.members {
			if m.acked && !m.ack.Released {
				t.Acked = append(t.Acked, m.ack.Revision)
			}
		}
		for name, share := range c.learned {
			t.Learned[c.prefix+name] = max(t.Learned[c.prefix+name], share)
		}
		for name, share := range c.own {
			t.Own[c.prefix+name] = max(t.Own[c.prefix+name], share)
		}
		for name, share := range c.reads {
			t.Reads[c.prefix+name] = share
		}
	}
	var rec *handover.Snapshot
	if d.record != nil {
		s := snapshotOf(d.record)
		if d.shared {
			upgradeKeys(&s, d.callers)
		}
		// What the record says of the pods of a caller that reads another
		// epoch's document is only what they may hold.
		for _, c := range d.callers {
			if !c.elsewhere {
				continue
			}
			for key, r := range s.Records {
				if strings.HasPrefix(key, c.prefix) {
					t.Learned[key] = max(t.Learned[key], r.Bound())
					delete(s.Records, key)
				}
			}
		}
		rec = &s
	}
	return handover.Resume(d.epoch, rec, t, d.now, d.clock)
}

// upgradeKeys rewrites the keys "<namespace>/<pod>" of a shared contract's
// record written before pods were keyed by quota: the pod's record becomes
// that of every caller of the namespace that lists the pod.
func upgradeKeys(s *handover.Snapshot, callers []*caller) {
	for key, r := range s.Records {
		ns, quota, pod := splitKey(key)
		if quota != "" || ns == "" {
			continue
		}
		for _, c := range callers {
			if c.namespace != ns {
				continue
			}
			for _, m := range c.members {
				if m.name == pod {
					s.Records[m.key] = r
					delete(s.Records, key)
				}
			}
		}
	}
}

// departingKeys returns the keys of the records that no member of any
// caller has: pods that left their caller (relabelled, gone, of a workload
// the quota no longer names) or callers that left the division.
func departingKeys(d *divisionInput, records map[string]handover.Record) []string {
	have := map[string]bool{}
	for _, c := range d.callers {
		for _, m := range c.members {
			have[m.key] = true
		}
	}
	var out []string
	for key, r := range records {
		if !have[key] && r.Bound() > 0 {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// splitKey returns the namespace, quota and pod of a key of a shared
// contract's record, "<namespace>/<quota>/<pod>"; an older record keyed
// "<namespace>/<pod>" has no quota.
func splitKey(key string) (namespace, quota, pod string) {
	parts := strings.Split(key, "/")
	switch len(parts) {
	case 3:
		return parts[0], parts[1], parts[2]
	case 2:
		return parts[0], "", parts[1]
	}
	return "", "", key
}

// callerPrefix is the key prefix of a quota's pods in a shared contract.
func callerPrefix(namespace, quota string) string { return namespace + "/" + quota + "/" }

// handoverStep is the outcome of one step of a division.
type handoverStep struct {
	// status is the new division status: the record every pod's share is
	// published from, and its view.
	status *v1alpha1.DivisionStatus
	// callers are the step as each caller sees it, aligned with the
	// division's callers.
	callers []callerStep
	// changed is set when the record differs from the previous one, so it
	// must be written before publishing.
	changed bool
	// waiting, pending and stalled name, by key, the serving pods below
	// their target, the pods that may still hold more than they are told,
	// and of those the ones that acknowledge but have not acknowledged
	// their smaller share within stalledAfter.
	waiting, pending, stalled []string
	// recheck is when, if positive, a step should run again although no
	// watch fires: a delay or a stall deadline passes.
	recheck time.Duration
}

// callerStep is one caller's part of a step, its pods named without the
// prefix.
type callerStep struct {
	status *v1alpha1.DivisionStatus
	// told maps each pod told a share to its permits: the caller's
	// document.
	told map[string]int
	// holding maps each pod that may hold more than it is told to what
	// it may hold: the document carries it, so that a lost record can be
	// rebuilt from it.
	holding map[string]int
	// departing is set while the record counts pods of the caller that are
	// not its members: its documents must reach them.
	departing                 bool
	waiting, pending, stalled []string
	// othersWaiting and othersPending name, as <namespace>/<pod>, the
	// pods of the division's other callers that wait for capacity or are
	// to let go of it: a caller's own pods may wait for theirs, or they
	// for its own.
	othersWaiting, othersPending []string
	// unacknowledged is the division's spec.handover.unacknowledgedDelay,
	// which the documents carry: a pod that does not acknowledge and
	// cannot reach its plan source gives its share up before it passes.
	unacknowledged time.Duration
	// serving counts the caller's serving pods, and least and most are
	// the least and the most one of them is told: status.podPermits.
	serving, least, most int64
}

// podPermits is status.podPermits: what the caller's serving pods are
// told, "5", or "0-5" while they differ; "0" with no serving pod.
func (c callerStep) podPermits() string {
	if c.serving == 0 || c.least == c.most {
		return fmt.Sprint(c.most)
	}
	return fmt.Sprintf("%d-%d", c.least, c.most)
}

// countServing notes that a serving pod of the caller is told told.
func (c *callerStep) countServing(told int64) {
	if c.serving == 0 {
		c.least, c.most = told, told
	}
	c.serving++
	c.least, c.most = min(c.least, told), max(c.most, told)
}

// shares returns the caller's part as a published document's division:
// pods not named hold nothing.
func (c callerStep) shares() quota.Shares {
	return quota.Shares{Epoch: c.status.Epoch, Revision: c.status.Revision, Pods: c.told, Holding: c.holding,
		UnacknowledgedDelay: c.unacknowledged}
}

// step runs one handover step of the division from res: every caller's
// part is divided exactly over its serving pods, and the handover runs
// over all of them against the sum of the parts.
func step(d *divisionInput, res handover.Resumed) handoverStep {
	unacknowledged, stalledAfter := handoverSettings(d.handover)
	entries, in := stepInput(d, res)
	total := in.Total
	r := handover.Step(in)

	out := handoverStep{recheck: r.RecheckAfter}
	cs := make([]callerStep, len(d.callers))
	for i := range cs {
		cs[i].told = map[string]int{}
		cs[i].unacknowledged = unacknowledged
	}
	views := make([]*v1alpha1.PodShareStatus, len(entries))
	for i, e := range entries {
		rec, c := r.Records[i], &cs[e.c]
		if rec.Told > 0 {
			c.told[e.m.name] = int(rec.Told)
		}
		if rec.Holds > rec.Told {
			if c.holding == nil {
				c.holding = map[string]int{}
			}
			c.holding[e.m.name] = int(rec.Holds)
		}
		if e.m.serving && !e.m.gone {
			// A serving pod is never told more than its target (a
			// smaller share is told at once; the rest is what it holds),
			// so its told share is what its gate enforces. The broker's
			// replicas hold the reserve, not a pod's share.
			if !d.callers[e.c].isLender(e.m) {
				c.countServing(rec.Told)
			}
			if rec.Told < e.target {
				out.waiting, c.waiting = append(out.waiting, e.m.key), append(c.waiting, e.m.name)
			}
		}
		if rec.Bound() == 0 && e.target == 0 {
			continue
		}
		if e.m.departed {
			c.departing = true
		}
		v := &v1alpha1.PodShareStatus{Name: e.m.key, Permits: int32(rec.Told)}
		if e.target != rec.Told && !e.m.leaving {
			v.Target = ptr.To(int32(e.target))
		}
		if rec.Holds > rec.Told {
			v.Holds = ptr.To(int32(rec.Holds))
			v.ShrunkAtRevision = rec.ShrunkAt
			v.ShrunkAt = ptr.To(microTime(rec.ShrunkTime))
			out.pending, c.pending = append(out.pending, e.m.key), append(c.pending, e.m.name)
			// A pod settled by time says when through the step's
			// RecheckAfter; one that acknowledges may stall.
			if rec.Acknowledges && !rec.Gone && (!e.m.acked || !e.m.ack.Released) {
				if wait := rec.ShrunkTime.Add(stalledAfter).Sub(d.now); wait <= 0 {
					out.stalled, c.stalled = append(out.stalled, e.m.key), append(c.stalled, e.m.name)
				} else {
					out.recheck = handover.Sooner(out.recheck, wait)
				}
			}
		}
		views[i] = v
	}

	summary := func(idx []int, part int64, trim string) *v1alpha1.DivisionStatus {
		return summarize(d, r, entries, views, idx, part, trim)
	}
	all := make([]int, len(entries))
	for i := range all {
		all[i] = i
	}
	out.status = summary(all, total, "")
	for ci, c := range d.callers {
		if len(d.callers) == 1 && c.prefix == "" {
			// A quota's own division: its part is the whole.
			cs[ci].status = out.status
			continue
		}
		var idx []int
		for i, e := range entries {
			if e.c == ci {
				idx = append(idx, i)
			}
		}
		cs[ci].status = summary(idx, c.total, c.prefix)
	}
	if len(d.callers) > 1 {
		for i, e := range entries {
			waiting := slices.Contains(cs[e.c].waiting, e.m.name)
			pending := views[i] != nil && views[i].Holds != nil
			for ci := range cs {
				if ci == e.c {
					continue
				}
				if waiting {
					cs[ci].othersWaiting = append(cs[ci].othersWaiting, podOfCaller(e.m.key))
				}
				if pending {
					cs[ci].othersPending = append(cs[ci].othersPending, podOfCaller(e.m.key))
				}
			}
		}
	}
	out.callers = cs
	out.changed = d.record == nil || d.record.Epoch != d.epoch || d.record.Revision != out.status.Revision ||
		d.record.Clock != d.clock || !sameRecord(d.record, out.status)
	return out
}

// stepEntry is one pod of a division's step: its caller's index, the
// member, and its target.
type stepEntry struct {
	c      int
	m      member
	target int64
}

// stepInput returns the pods of every caller of d with their targets (an
// exact division of each caller's part, equal or by demand), and the handover's input for them.
func stepInput(d *divisionInput, res handover.Resumed) ([]stepEntry, handover.Input) {
	unacknowledged, _ := handoverSettings(d.handover)
	var (
		entries []stepEntry
		total   int64
	)
	previous := previousTargets(d)
	for ci, c := range d.callers {
		total += c.total
		in := make([]division.Member, 0, len(c.members))
		for _, m := range c.members {
			in = append(in, division.Member{Key: m.key, Serving: m.serving && !m.gone, Told: res.Records[m.key].Told})
		}
		for i, t := range c.targets(in, previous) {
			entries = append(entries, stepEntry{c: ci, m: c.members[i], target: t})
		}
	}
	fresh := res.Fresh || res.Learned
	for _, c := range d.callers {
		fresh = fresh || c.outdated(d.epoch, res.Revision, unacknowledged)
	}
	in := handover.Input{Total: total, Revision: res.Revision, Fresh: fresh, Now: d.now, UnacknowledgedDelay: unacknowledged,
		Pods: make([]handover.Pod, len(entries))}
	for i, e := range entries {
		p := handover.Pod{Key: e.m.key, Target: e.target, Leaving: e.m.leaving, Gone: e.m.gone, Declared: e.m.declared,
			Published: d.callers[e.c].published, Unreached: d.callers[e.c].unreached, Record: res.Records[e.m.key]}
		if e.m.acked {
			p.Acked, p.Released = e.m.ack.Revision, e.m.ack.Released
		}
		p.Readable = d.callers[e.c].readable(e.m.name)
		in.Pods[i] = p
	}
	return entries, in
}

// summarize returns the record of the pods idx of a step's entries (a
// caller's, or all), whose part is part, their keys without trim.
func summarize(d *divisionInput, r handover.Result, entries []stepEntry, views []*v1alpha1.PodShareStatus, idx []int, part int64, trim string) *v1alpha1.DivisionStatus {
	st := &v1alpha1.DivisionStatus{Epoch: d.epoch, Revision: r.Revision, Usable: int32(part), Clock: d.clock}
	var serving int64
	shares := map[int32]int32{}
	// Base, extra and shares are the workload's pods': the broker's
	// replicas divide the reserve apart from them.
	podPart := part - reserveOf(d, entries, idx)
	own := map[string]handover.Record{}
	var listed []v1alpha1.PodShareStatus
	for _, i := range idx {
		rec, m := r.Records[i], entries[i].m
		lender := d.callers[entries[i].c].isLender(m)
		if m.serving && !m.gone && !lender {
			serving++
		}
		if rec.Told > 0 {
			st.HandedOut += int32(rec.Told)
			if !lender {
				shares[int32(rec.Told)]++
			}
		}
		st.Held += int32(rec.Bound())
		if rec.Bound() > 0 {
			own[strings.TrimPrefix(m.key, trim)] = rec
		}
		if v := views[i]; v != nil {
			v := *v
			v.Name = strings.TrimPrefix(v.Name, trim)
			listed = append(listed, v)
		}
	}
	if serving > 0 {
		st.Base, st.Extra = int32(podPart/serving), int32(podPart%serving)
	}
	for permits, pods := range shares {
		st.Shares = append(st.Shares, v1alpha1.ShareCount{Permits: permits, Pods: pods})
	}
	slices.SortFunc(st.Shares, func(a, b v1alpha1.ShareCount) int { return cmp.Compare(b.Permits, a.Permits) })
	st.Told, st.Holding = recordOf(own)
	st.Pods, st.PodsNotListed = listedPods(listed)
	return st
}

// microTime returns t as the API server keeps it: to the microsecond.
func microTime(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Truncate(time.Microsecond))
}

// recordOf returns records, by key, as a division status's record: the
// pods told a share and holding no more grouped by share, and those that
// may hold more grouped by what they hold and since when.
func recordOf(records map[string]handover.Record) ([]v1alpha1.ToldPods, []v1alpha1.HeldPods) {
	told := map[int32][]string{}
	type heldKey struct {
		permits, holds int32
		rev            int64
		at             time.Time
		acks, gone     bool
		released       bool
	}
	held := map[heldKey][]string{}
	for key, r := range records {
		if r.Holds > r.Told {
			k := heldKey{int32(r.Told), int32(r.Holds), r.ShrunkAt, r.ShrunkTime.Truncate(time.Microsecond).UTC(), r.Acknowledges, r.Gone, r.Released}
			held[k] = append(held[k], key)
		} else if r.Told > 0 {
			told[int32(r.Told)] = append(told[int32(r.Told)], key)
		}
	}
	var t []v1alpha1.ToldPods
	for _, permits := range slices.Sorted(maps.Keys(told)) {
		t = append(t, v1alpha1.ToldPods{Permits: permits, Pods: slices.Sorted(slices.Values(told[permits]))})
	}
	slices.Reverse(t)
	var h []v1alpha1.HeldPods
	for k, pods := range held {
		h = append(h, v1alpha1.HeldPods{Permits: k.permits, Holds: k.holds, ShrunkAtRevision: k.rev, ShrunkAt: metav1.NewMicroTime(k.at),
			Acknowledges: k.acks, Gone: k.gone, Released: k.released, Pods: slices.Sorted(slices.Values(pods))})
	}
	slices.SortFunc(h, func(a, b v1alpha1.HeldPods) int {
		return cmp.Or(cmp.Compare(b.Permits, a.Permits), cmp.Compare(b.Holds, a.Holds), cmp.Compare(a.ShrunkAtRevision, b.ShrunkAtRevision),
			a.ShrunkAt.Compare(b.ShrunkAt.Time), cmp.Compare(a.Pods[0], b.Pods[0]))
	})
	return t, h
}

// snapshotOf reads a division status's record back: its told and holding,
// or, from a status written before they existed, its pods.
func snapshotOf(d *v1alpha1.DivisionStatus) handover.Snapshot {
	s := handover.Snapshot{Epoch: d.Epoch, Revision: d.Revision, Clock: d.Clock, Records: map[string]handover.Record{}}
	if len(d.Told) == 0 && len(d.Holding) == 0 {
		for _, p := range d.Pods {
			r := handover.Record{Told: int64(p.Permits), Holds: int64(p.Permits)}
			if p.Holds != nil && int64(*p.Holds) > r.Told {
				r.Holds, r.ShrunkAt = int64(*p.Holds), p.ShrunkAtRevision
				if p.ShrunkAt != nil {
					r.ShrunkTime = p.ShrunkAt.Time
				}
			}
			s.Records[p.Name] = r
		}
		return s
	}
	for _, g := range d.Told {
		for _, pod := range g.Pods {
			s.Records[pod] = handover.Record{Told: int64(g.Permits), Holds: int64(g.Permits)}
		}
	}
	for _, g := range d.Holding {
		for _, pod := range g.Pods {
			s.Records[pod] = handover.Record{Told: int64(g.Permits), Holds: max(int64(g.Holds), int64(g.Permits)), ShrunkAt: g.ShrunkAtRevision,
				ShrunkTime: g.ShrunkAt.Time, Acknowledges: g.Acknowledges, Gone: g.Gone, Released: g.Released}
		}
	}
	return s
}

// sameRecord reports whether two division statuses record the same told
// and holding.
func sameRecord(a, b *v1alpha1.DivisionStatus) bool {
	return equality.Semantic.DeepEqual(a.Told, b.Told) && equality.Semantic.DeepEqual(a.Holding, b.Holding)
}

// listedPods returns up to MaxListedPods of the pods, those whose handover
// is under way (they hold more than they are told, or wait) first, then by
// name, and how many it leaves out; the list is sorted by name.
func listedPods(pods []v1alpha1.PodShareStatus) ([]v1alpha1.PodShareStatus, int32) {
	busy := func(p v1alpha1.PodShareStatus) int {
		if p.Holds != nil || p.Target != nil {
			return 0
		}
		return 1
	}
	slices.SortFunc(pods, func(a, b v1alpha1.PodShareStatus) int {
		return cmp.Or(cmp.Compare(busy(a), busy(b)), cmp.Compare(a.Name, b.Name))
	})
	left := max(0, len(pods)-v1alpha1.MaxListedPods)
	pods = pods[:len(pods)-left]
	slices.SortFunc(pods, func(a, b v1alpha1.PodShareStatus) int { return cmp.Compare(a.Name, b.Name) })
	return pods, int32(left)
}

// usableTotal is what a caller's division hands out: the plan's usable
// permits, or one per serving pod when AtLeastOne raised them.
func usableTotal(p quota.Sizing) int64 { return p.Result.TotalPermits }

// handedOverCondition says whether the handover of a division, or of a
// caller's part of it, is done, in progress or stalled. waiting and
// pending name the pods that wait for capacity and those that are to let
// go of it, stalled those of pending that have not acknowledged in time;
// each list may be empty, and no message shows an empty one.
func handedOverCondition(st *v1alpha1.DivisionStatus, waiting, pending, stalled []string) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionHandedOver, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonHandedOver}
	switch {
	case len(stalled) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonHandoverStalled
		c.Message = fmt.Sprintf("pods %s have not acknowledged their smaller share; their old share stays counted", podList(stalled))
		if len(waiting) > 0 {
			c.Message += fmt.Sprintf(", so pods %s wait for it", podList(waiting))
		}
	case len(waiting) > 0 || len(pending) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonHandoverInProgress
		c.Message = fmt.Sprintf("%d of %d permits handed out, %d held; ", st.HandedOut, st.Usable, st.Held)
		switch {
		case len(pending) == 0:
			c.Message += fmt.Sprintf("pods %s wait for their share", podList(waiting))
		case len(waiting) == 0:
			c.Message += fmt.Sprintf("pods %s are to let go of capacity", podList(pending))
		default:
			c.Message += fmt.Sprintf("pods %s wait for pods %s to let go of capacity", podList(waiting), podList(pending))
		}
	default:
		c.Message = fmt.Sprintf("%d of %d permits handed out to the Ready pods at revision %d", st.HandedOut, st.Usable, st.Revision)
	}
	return c
}

// condition is the HandedOver condition of the whole step.
func (h handoverStep) condition() metav1.Condition {
	return handedOverCondition(h.status, h.waiting, h.pending, h.stalled)
}

// condition is the HandedOver condition of the caller's part: its own pods
// by name, and the other callers' pods as <namespace>/<pod> where its own
// wait for theirs to let go, or theirs wait for its own.
func (c callerStep) condition() metav1.Condition {
	waiting, pending := c.waiting, c.pending
	if len(c.waiting) > 0 {
		pending = append(slices.Clip(pending), c.othersPending...)
	}
	if len(c.pending) > 0 {
		waiting = append(slices.Clip(waiting), c.othersWaiting...)
	}
	return handedOverCondition(c.status, waiting, pending, c.stalled)
}

// podOfCaller returns a contract's division key <namespace>/<quota>/<pod>
// as <namespace>/<pod>, the pod's name in the API.
func podOfCaller(key string) string {
	ns, _, pod := splitKey(key)
	if ns == "" {
		return key
	}
	return ns + "/" + pod
}

// podList lists up to maxPending names, and how many more.
func podList(list []string) string {
	if len(list) <= maxPending {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:maxPending], ", "), len(list)-maxPending)
}
