package handover

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// The simulation below plays pods, their processes, the operator and an
// adversary against each other, one tick (a second) at a time, so that the
// tests can check what a user would see: the permits the pods' processes
// can enforce, counted from the documents they accepted by the runtime's
// own rules, not from the operator's bookkeeping.
//
// The operator is played as the controller plays it: Resume over its
// record (which it keeps per epoch, as a quota's own division and a shared
// contract each keep theirs) and what the ConfigMaps and the pods'
// acknowledgements show, pods only the record counts taken as gone, the
// targets of an exact division of each caller's fair part, Step, the record
// written, then the documents published.
//
// What the guarantee assumes, the world obeys: a pod that does not
// acknowledge applies a document within half the unacknowledged delay of
// its publication and drains to it within the other half; the process of a
// pod whose object is deleted ends within the delay; a pod acknowledges
// only what it enforces with its calls within it; the record and the
// document the pods read are not lost together (no old document written
// back while the record is lost); an old document written back is of the
// epoch the ConfigMap holds (pods cannot order the documents of two
// epochs); the replicas' clocks agree better than the time between two
// incarnations of an epoch. Everything else the adversary may do: forge
// acknowledgements from the future, of another epoch, or garble or remove
// them; delete the record or roll it back to an earlier copy, also while
// its division is away in another epoch; switch the division's epoch back
// and forth (a quota moved to a shared contract and back) at any time,
// losing the record of the epoch it comes back to; deliver old documents
// late; force-delete pods with their
// processes running; turn a caller away and back; fail publications; hand
// the operator to a replica whose clock is off (by up to 250 ms). Pods
// that acknowledge may refresh slowly, 10 to 30 s, when the operator can
// tell that they do.
//
// A pod that does not acknowledge may also be cut off from its plan source
// for up to 30 ticks: it keeps applying what its source held when it was
// cut, reads nothing newer, and, as the library does, lapses to a limit of
// 0 once it has gone simLapse without its source (the delay less the drain
// bound of half the delay, less a tick for the source's last delivery),
// and reads its ConfigMap again once the source is back. Without the lapse
// (worldParams.noLapse) the guarantee does not hold.

const (
	simTick  = time.Second
	simDelay = 10 * simTick // UnacknowledgedDelay
	// simLapse is how long a pod cut off from its source goes before it
	// lapses: the delay, less the half in which its calls drain, less a
	// tick, the granularity of what its source last delivered.
	simLapse = simDelay - simDelay/2 - simTick
)

// simDoc is one published document: what it gives each pod, by key (a pod
// it does not name holds nothing).
type simDoc struct {
	epoch    string
	revision int64
	shares   map[string]int64
	holding  map[string]int64 // what pods may still hold above their share
	at       time.Time        // when it was published
	// known holds the pods seen to acknowledge when it was published:
	// declared so, or showing an acknowledgement of a revision of its
	// epoch published before it. These may apply it as late as they like.
	known map[string]bool
}

// annotation is a pod's acknowledgement annotation as the operator reads
// it.
type annotation struct {
	epoch    string
	revision int64
	released bool
}

// simPod is one pod: its object, as the operator sees it, and its process.
type simPod struct {
	key    string
	caller int
	object bool // the pod object exists
	// relabelled is set for a pod relabelled out of its workload: it
	// exists, but its caller no longer lists it.
	relabelled bool
	// unseen is set for a pod created again under a gone pod's name
	// until a reconcile has seen its object: the guarantee assumes it is
	// not force-deleted before (a pod that existed only between two
	// reconciles is seen by nothing).
	unseen   bool
	ready    bool
	leaving  bool
	declared Declaration
	ann      *annotation

	acks     bool // its runtime acknowledges
	running  bool
	closed   bool      // its gate is closed: the pod shuts down
	killAt   time.Time // a force-deleted pod's process ends then
	doc      *simDoc   // the document it enforces
	seen     map[string]int64
	limit    int64
	inflight int64
	drainBy  time.Time
	lag      int // ticks it takes to apply a document
	// slowLag, when positive, is how long it takes instead to apply a
	// document that knows it acknowledges (simDoc.known).
	slowLag int
	behind  time.Time // since when it has not applied its ConfigMap's document
	// ackedDoc is the document it last acknowledged.
	ackedDoc *simDoc
	// cutAt and cutUntil bound a cut-off from its plan source, zero when
	// connected; cutDoc is what the source held when it was cut.
	cutAt, cutUntil time.Time
	cutDoc          *simDoc
	// lapsed is set while it enforces a limit of 0 for want of its source.
	lapsed bool
}

// world is the simulation.
type world struct {
	rng   *rand.Rand
	now   time.Time
	total int64

	callers int
	weight  [2]int64
	demand  [2]int64
	away    [2]bool // the caller is turned away: its part is 0
	parts   []int64

	pods     []*simPod
	byKey    map[string]*simPod
	nextName int

	epochs  [2]string
	cur     int
	records [2]*Snapshot  // the record each epoch's owner keeps
	history [2][]Snapshot // every record written, for rollbacks
	docs    [2]*simDoc    // each caller's ConfigMap
	sent    [2][]*simDoc  // every document published to each caller
	clock   string        // the operator replica's clock
	skew    time.Duration // how far its clock is off the world's
	fail    bool          // publications fail
	// lost[e] is set from the loss of epoch e's record (deleted, rolled
	// back) until the operator writes it again, also while the division
	// is in the other epoch; stale[c] from an old document written
	// back into caller c's ConfigMap until the operator writes it again.
	// The guarantee assumes they do not coincide: a pod's share can be
	// learned from the record or from the document it read, not from
	// neither.
	lost  [2]bool
	stale [2]bool
	log   []string // what happened, for a failure's message
	steps int
	// cuts draws the cut-offs from plan sources, apart from rng so that
	// the other events of a seed are those they were before cut-offs.
	cuts *rand.Rand
	// namesakes draws the pods created again under a gone pod's name,
	// apart from rng for the same reason.
	namesakes *rand.Rand
	noLapse   bool // pods cut off from their source keep their limit
}

func newWorld(seed uint64, total int64, callers int) *world {
	w := &world{
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		total:     total,
		callers:   callers,
		weight:    [2]int64{1 + int64(seed%3), 1},
		demand:    [2]int64{division.Unbounded, division.Unbounded},
		byKey:     map[string]*simPod{},
		epochs:    [2]string{"epoch-own", "epoch-shared"},
		clock:     "replica-0",
		cuts:      rand.New(rand.NewPCG(seed^0x5851f42d4c957f2d, seed)),
		namesakes: rand.New(rand.NewPCG(seed^0x2545f4914f6cdd1d, seed)),
	}
	return w
}

func (w *world) note(format string, args ...any) {
	if len(w.log) < 400 {
		w.log = append(w.log, fmt.Sprintf("t=%ds ", int(w.now.Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))/simTick))+fmt.Sprintf(format, args...))
	}
}

// addPod adds a pod whose runtime acknowledges with probability acksShare
// in 10; a third of the pods declare what they do.
func (w *world) addPod(acksShare int) {
	p := &simPod{
		key: fmt.Sprintf("pod-%03d", w.nextName), caller: w.rng.IntN(w.callers), object: true, running: true,
		acks: w.rng.IntN(10) < acksShare, lag: w.rng.IntN(4), seen: map[string]int64{},
	}
	if p.acks && w.rng.IntN(3) == 0 {
		p.slowLag = 10 + w.rng.IntN(21)
	}
	if w.rng.IntN(3) == 0 {
		p.declared = DeclaredSilent
		if p.acks {
			p.declared = DeclaredAcknowledging
		}
	}
	w.nextName++
	w.pods = append(w.pods, p)
	w.byKey[p.key] = p
	// A new process reads the current document at once: it does not name
	// it, so it holds nothing.
	if d := w.docs[p.caller]; d != nil {
		p.read(d, w.now)
	}
	w.note("%s added to caller %d, acks %v, declared %d", p.key, p.caller, p.acks, p.declared)
}

// read puts d in force in p's process, by the runtime's rules: a document
// not newer than a revision of its epoch put in force before is refused.
func (p *simPod) read(d *simDoc, now time.Time) bool {
	if p.doc == d {
		return false
	}
	if rev, ok := p.seen[d.epoch]; ok && d.revision <= rev {
		return false
	}
	p.doc, p.seen[d.epoch] = d, d.revision
	if p.lapsed {
		return true // it admits nothing until its source is back
	}
	p.limit = d.shares[p.key]
	if by := now.Add(simDelay / 2); !p.acks && p.inflight > p.limit && (p.drainBy.IsZero() || by.Before(p.drainBy)) {
		// Calls have deadlines: above the limit they are done within
		// half the delay of the document being applied; a later
		// document does not put off the end of calls admitted before.
		p.drainBy = by
	}
	return true
}

// member reports whether the pod's caller lists it.
func (p *simPod) member() bool { return p.object && !p.relabelled }

// enforceable is what the pods' processes can have in flight together:
// for each, the larger of its limit and its calls in flight (only these
// once its gate is closed).
func (w *world) enforceable() (int64, string) {
	var n int64
	var parts []string
	for _, p := range w.pods {
		if p.running {
			e := max(p.limit, p.inflight)
			if p.closed {
				e = p.inflight // a closed gate admits nothing ever again
			}
			n += e
			if e > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", p.key, e))
			}
		}
	}
	return n, strings.Join(parts, " ")
}

// controller runs one reconcile of the division of the current epoch.
func (w *world) controller() {
	w.steps++
	for _, p := range w.pods {
		p.unseen = p.unseen && !p.object
	}
	epoch := w.epochs[w.cur]
	now := w.now.Add(w.skew)
	t := Trace{Learned: map[string]int64{}, Own: map[string]int64{}, Reads: map[string]int64{}}
	published := [2]int64{}
	for c := range w.callers {
		d := w.docs[c]
		if d == nil {
			continue
		}
		for _, p := range w.pods {
			if p.member() && p.caller == c {
				t.Reads[p.key] = d.shares[p.key]
			}
		}
		learned := t.Learned
		t.Elsewhere = t.Elsewhere || d.epoch != epoch
		if d.epoch == epoch {
			t.Revisions = append(t.Revisions, d.revision)
			published[c] = d.revision
			learned = t.Own
		} else if other := w.records[1-w.cur]; other != nil && other.Epoch == d.epoch {
			// While its pods read another epoch's document, what that
			// epoch's record says they may hold counts too.
			for k, r := range other.Records {
				if q := w.byKey[k]; q != nil && q.caller == c {
					t.Learned[k] = max(t.Learned[k], r.Bound())
				}
			}
		}
		for k, s := range d.shares {
			learned[k] = max(learned[k], s)
		}
		for k, s := range d.holding {
			learned[k] = max(learned[k], s)
		}
	}
	for _, p := range w.pods {
		if a := p.ann; p.object && a != nil && a.epoch == epoch && !a.released {
			t.Acked = append(t.Acked, a.revision)
		}
	}
	// A pod whose caller reads another epoch's document has been told
	// things since this record was written: what the record says of it is
	// only what it may hold, as what other records say.
	rec := w.records[w.cur]
	if rec != nil {
		cp := *rec
		cp.Records = maps.Clone(rec.Records)
		for k, r := range cp.Records {
			if q := w.byKey[k]; q != nil && w.docs[q.caller] != nil && w.docs[q.caller].epoch != epoch {
				t.Learned[k] = max(t.Learned[k], r.Bound())
				delete(cp.Records, k)
			}
		}
		rec = &cp
	}
	res := Resume(epoch, rec, t, now, w.clock)

	// The split over the callers admitted: a caller without serving pods
	// takes no part, not even of a surplus.
	var claims []division.Claim
	var who []int
	for c := range w.callers {
		if w.away[c] {
			continue
		}
		for _, p := range w.pods {
			if p.caller == c && p.member() && p.ready && !p.leaving {
				claims = append(claims, division.Claim{Name: fmt.Sprint("caller-", c), Weight: w.weight[c], Demand: w.demand[c]})
				who = append(who, c)
				break
			}
		}
	}
	w.parts = make([]int64, w.callers)
	for i, part := range division.FairShare(w.total, claims) {
		w.parts[who[i]] = part
	}

	// The pods of each caller, and those only the record counts.
	keys := map[string]bool{}
	var pods []Pod
	targets := map[string]int64{}
	for c := range w.callers {
		var members []division.Member
		for _, p := range w.pods {
			if p.member() && p.caller == c {
				members = append(members, division.Member{Key: p.key, Serving: p.ready && !p.leaving, Told: res.Records[p.key].Told})
			}
		}
		for i, tg := range division.Targets(w.parts[c], members) {
			targets[members[i].Key] = tg
		}
	}
	for _, p := range w.pods {
		if p.member() {
			keys[p.key] = true
		}
	}
	for k := range res.Records {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		p := w.byKey[k]
		in := Pod{Key: k, Target: targets[k], Record: res.Records[k]}
		if p == nil || !p.object {
			in.Gone = true
			if p != nil {
				in.Published = published[p.caller]
			}
		} else {
			in.Leaving, in.Declared, in.Published = p.leaving, p.declared, published[p.caller]
			if a := p.ann; a != nil && a.epoch == epoch {
				in.Acked, in.Released = a.revision, a.released
			}
		}
		if p != nil && w.docs[p.caller] != nil {
			in.Readable = w.docs[p.caller].shares[k]
		}
		pods = append(pods, in)
	}
	r := Step(Input{Total: w.total, Revision: res.Revision, Fresh: res.Fresh || res.Learned, Now: now, UnacknowledgedDelay: simDelay, Pods: pods})

	// Write ahead, then publish.
	written := Snapshot{Epoch: epoch, Revision: r.Revision, Clock: w.clock, Records: map[string]Record{}}
	for i, p := range pods {
		if r.Records[i].Bound() > 0 {
			written.Records[p.Key] = r.Records[i]
		}
	}
	w.records[w.cur] = &written
	w.lost[w.cur] = false
	w.history[w.cur] = append(w.history[w.cur], written)

	if w.fail {
		w.note("publication of revision %d of %s failed", r.Revision, epoch)
		return
	}
	for c := range w.callers {
		if d := w.docs[c]; d != nil && d.epoch == epoch && d.revision == r.Revision {
			continue
		}
		d := &simDoc{epoch: epoch, revision: r.Revision, shares: map[string]int64{}, holding: map[string]int64{}, at: w.now, known: map[string]bool{}}
		for i, p := range pods {
			q := w.byKey[p.Key]
			if q == nil || q.caller != c {
				continue
			}
			if a := q.ann; q.declared == DeclaredAcknowledging || a != nil && q.object && a.epoch == epoch && !a.released && a.revision > 0 && a.revision < r.Revision {
				d.known[p.Key] = true
			}
			if r.Records[i].Told > 0 {
				d.shares[p.Key] = r.Records[i].Told
			}
			if r.Records[i].Holds > r.Records[i].Told {
				d.holding[p.Key] = r.Records[i].Holds
			}
		}
		w.docs[c], w.stale[c] = d, false
		w.sent[c] = append(w.sent[c], d)
		w.note("published %s/%d to caller %d: %v", epoch, r.Revision, c, d.shares)
	}
}

// processes lets every process run for one tick: read documents, admit and
// finish calls, acknowledge, shut down, end.
func (w *world) processes() {
	for _, p := range w.pods {
		if !p.running {
			continue
		}
		if !p.killAt.IsZero() && !w.now.Before(p.killAt) {
			p.running, p.inflight, p.limit = false, 0, 0
			w.note("%s's process ended", p.key)
			continue
		}
		w.sourceOf(p)
		d := w.docs[p.caller]
		if !p.cutAt.IsZero() {
			d = p.cutDoc
		}
		if d == nil || d == p.doc {
			p.behind = time.Time{}
		} else {
			if p.behind.IsZero() {
				p.behind = w.now
			}
			// A pod that does not acknowledge applies within half the
			// delay; one that does may lag as long as it likes (it
			// refreshes slowly), but the operator can tell that it
			// acknowledges only from what it declared or showed.
			age, lag := w.now.Sub(d.at), p.lag
			if d.known[p.key] && p.slowLag > 0 {
				age, lag = w.now.Sub(p.behind), p.slowLag
			}
			if age >= time.Duration(lag)*simTick || (!p.acks && w.now.Sub(d.at) >= simDelay/2) {
				if p.read(d, w.now) {
					p.behind = time.Time{}
					w.note("%s read %s/%d: %d", p.key, d.epoch, d.revision, p.limit)
				}
			}
		}
		if p.object && p.ready && !p.closed && p.inflight < p.limit {
			p.inflight = min(p.limit, p.inflight+w.rng.Int64N(4))
		}
		if p.inflight > 0 {
			p.inflight -= w.rng.Int64N(p.inflight + 1)
		}
		if !p.acks && !p.drainBy.IsZero() && !w.now.Before(p.drainBy) {
			p.inflight = min(p.inflight, p.limit)
			p.drainBy = time.Time{}
		}
		if p.acks && p.object && p.doc != nil && p.inflight <= p.limit && !p.closed {
			// The runtime writes its acknowledgement once per document
			// it applied: one removed or forged stays until the next.
			if p.ackedDoc != p.doc {
				p.ann, p.ackedDoc = &annotation{epoch: p.doc.epoch, revision: p.doc.revision}, p.doc
			}
		}
		if p.leaving && p.closed && p.inflight == 0 && p.acks && p.object && p.doc != nil {
			p.ann = &annotation{epoch: p.doc.epoch, released: true}
		}
	}
}

// sourceOf plays p's plan source for one tick: a cut-off ends, the pod
// lapses, or it reads its ConfigMap again once back.
func (w *world) sourceOf(p *simPod) {
	if p.cutAt.IsZero() {
		return
	}
	if !w.now.Before(p.cutUntil) {
		p.cutAt, p.cutUntil, p.cutDoc = time.Time{}, time.Time{}, nil
		// Back: the source reads the ConfigMap before the gate gets its
		// share again.
		if d := w.docs[p.caller]; d != nil {
			p.read(d, w.now)
		}
		if p.lapsed {
			p.lapsed, p.limit = false, 0
			if p.doc != nil {
				p.limit = p.doc.shares[p.key]
			}
			w.note("%s's source is back: %d", p.key, p.limit)
		}
		return
	}
	if !w.noLapse && !p.lapsed && w.now.Sub(p.cutAt) >= simLapse {
		p.lapsed, p.limit = true, 0
		if by := w.now.Add(simDelay / 2); p.inflight > 0 && (p.drainBy.IsZero() || by.Before(p.drainBy)) {
			p.drainBy = by
		}
		w.note("%s lapsed without its source", p.key)
	}
}

// cutOff cuts, with a chance of attacks in 40, a pod that does not
// acknowledge off from its plan source for 1 to 30 ticks.
func (w *world) cutOff(attacks int) {
	if len(w.pods) == 0 || w.cuts.IntN(40) >= attacks {
		return
	}
	p := w.pods[w.cuts.IntN(len(w.pods))]
	if p.acks || !p.running || !p.cutAt.IsZero() {
		return
	}
	p.cutAt, p.cutUntil, p.cutDoc = w.now, w.now.Add(time.Duration(1+w.cuts.IntN(30))*simTick), w.docs[p.caller]
	w.note("%s cut off from its source until t+%v", p.key, p.cutUntil.Sub(w.now))
}

// event changes the world at random, as its users do.
func (w *world) event(acksShare int) {
	switch k := w.rng.IntN(10); {
	case k < 3 && len(w.pods) < 14:
		w.addPod(acksShare)
	case k < 5 && len(w.pods) > 0:
		p := w.pods[w.rng.IntN(len(w.pods))]
		if p.object && !p.leaving {
			p.ready = !p.ready || w.rng.IntN(4) > 0
			w.note("%s ready %v", p.key, p.ready)
		}
	case k < 7 && len(w.pods) > 0:
		p := w.pods[w.rng.IntN(len(w.pods))]
		switch {
		case !p.object:
		case !p.leaving:
			p.leaving = true
			w.note("%s terminating", p.key)
		case !p.closed:
			p.closed = true
			w.note("%s closed its gate", p.key)
		}
	case k < 8 && w.callers > 1:
		c := w.rng.IntN(w.callers)
		if w.rng.IntN(3) == 0 {
			w.demand[c] = division.Unbounded
		} else {
			w.demand[c] = w.rng.Int64N(w.total + 2)
		}
		w.note("caller %d demands %d", c, w.demand[c])
	case len(w.pods) > 0:
		// A terminating pod is gone once it drained, released or its
		// grace period passed: its process ends with it.
		p := w.pods[w.rng.IntN(len(w.pods))]
		if p.object && p.leaving && (p.closed && p.inflight == 0 || w.rng.IntN(3) == 0) {
			p.object, p.running, p.inflight, p.limit = false, false, 0, 0
			w.note("%s gone", p.key)
		}
	}
}

// recreate creates, with a chance of 1 in 6 a tick, a pod again under the
// name of one whose object is gone and whose process ended, as a
// StatefulSet does: a new pod, not Ready, whose process reads what its
// caller's ConfigMap holds (a publication may have failed, an old document
// may have been written back), or, its kubelet behind, the document the
// ConfigMap held before a publication of the last tick. Documents name pods:
// what they give the name, the new process enforces.
func (w *world) recreate(acksShare int) {
	if w.namesakes.IntN(6) != 0 {
		return
	}
	var gone []*simPod
	for _, p := range w.pods {
		if !p.object && !p.running && w.byKey[p.key] == p {
			gone = append(gone, p)
		}
	}
	if len(gone) == 0 {
		return
	}
	old := gone[w.namesakes.IntN(len(gone))]
	p := &simPod{key: old.key, caller: old.caller, acks: w.namesakes.IntN(10) < acksShare, lag: w.namesakes.IntN(4), unseen: true}
	if w.namesakes.IntN(3) == 0 {
		p.declared = DeclaredSilent
		if p.acks {
			p.declared = DeclaredAcknowledging
		}
	}
	if w.stale[p.caller] {
		// What the guarantee assumes: a pod created under a gone pod's
		// name reads the document published before it or a newer one,
		// not an older one written back, which names it as it was.
		return
	}
	d := w.docs[p.caller]
	if sent := w.sent[p.caller]; len(sent) >= 2 && !sent[len(sent)-1].at.Before(w.now.Add(-simTick)) && w.namesakes.IntN(2) == 0 {
		d = sent[len(sent)-2]
	}
	w.start(p, d)
}

// start starts p, a pod created again under a gone pod's name, its process
// reading d.
func (w *world) start(p *simPod, d *simDoc) {
	p.object, p.running, p.seen = true, true, map[string]int64{}
	w.pods = append(w.pods, p)
	w.byKey[p.key] = p
	if d != nil {
		p.read(d, w.now)
	}
	w.note("%s created again in caller %d, acks %v, declared %d, reading %d (kubelet behind %v)", p.key, p.caller, p.acks, p.declared, p.limit, d != w.docs[p.caller])
}

// attack does one thing an adversary or an accident does.
func (w *world) attack() {
	epoch := w.epochs[w.cur]
	pod := func() *simPod {
		if len(w.pods) == 0 {
			return nil
		}
		return w.pods[w.rng.IntN(len(w.pods))]
	}
	switch w.rng.IntN(12) {
	case 0: // an acknowledgement from the future
		if p := pod(); p != nil && p.object {
			rev := int64(1) << 62
			if r := w.records[w.cur]; r != nil && w.rng.IntN(2) == 0 {
				rev = r.Revision + 1 + w.rng.Int64N(5)
			}
			p.ann = &annotation{epoch: epoch, revision: rev}
			w.note("%s's acknowledgement forged: %s/%d", p.key, epoch, rev)
		}
	case 1: // an acknowledgement removed or garbled
		if p := pod(); p != nil && p.object {
			p.ann = nil
			w.note("%s's acknowledgement removed", p.key)
		}
	case 2: // an acknowledgement of the other epoch
		if p := pod(); p != nil && p.object {
			p.ann = &annotation{epoch: w.epochs[1-w.cur], revision: w.rng.Int64N(100) + 1}
			w.note("%s's acknowledgement of the other epoch", p.key)
		}
	case 3: // the record deleted
		if w.stale != [2]bool{} {
			break
		}
		w.records[w.cur], w.lost[w.cur] = nil, true
		w.note("record of %s deleted", epoch)
	case 4: // the record rolled back
		// Also after its division moved to another epoch and back, when
		// nothing shows the revisions the pods remember: the division
		// comes back above the clock.
		if h := w.history[w.cur]; len(h) > 0 && w.stale == [2]bool{} {
			w.lost[w.cur] = true
			old := h[w.rng.IntN(len(h))]
			old.Records = maps.Clone(old.Records)
			w.records[w.cur] = &old
			w.note("record of %s rolled back to revision %d", epoch, old.Revision)
		}
	case 5: // the epoch switched: the record of the epoch it comes back to may be lost
		if w.stale != [2]bool{} {
			// Not while a ConfigMap holds an old document written back:
			// the new division would count what the old one's record
			// says the pods hold, but tell them what that document says.
			break
		}
		w.cur = 1 - w.cur
		if w.rng.IntN(2) == 0 && w.stale == [2]bool{} {
			w.records[w.cur], w.lost[w.cur] = nil, true
		}
		w.note("epoch switched to %s (record kept: %v)", w.epochs[w.cur], w.records[w.cur] != nil)
	case 6: // an old document: written back, or delivered late
		c := w.rng.IntN(w.callers)
		if len(w.sent[c]) == 0 {
			break
		}
		d := w.sent[c][w.rng.IntN(len(w.sent[c]))]
		if e := slices.Index(w.epochs[:], d.epoch); w.rng.IntN(2) == 0 && e == w.cur && !w.lost[e] && w.records[e] != nil && w.docs[c] != nil && w.docs[c].epoch == d.epoch && w.ordered(c, d.epoch) {
			// A deposed leader's late write, a restored backup, a GitOps
			// copy: the ConfigMap holds it until the operator writes again.
			// Only of the epoch the ConfigMap holds, the division's, and
			// once every pod of the caller has read a document of that
			// epoch: pods cannot order the documents of two epochs, and
			// take an old one of an epoch they have not read yet; and a
			// division of another epoch would tell them what it says.
			w.docs[c], w.stale[c] = d, true
			w.note("old document %s/%d written back for caller %d", d.epoch, d.revision, c)
			break
		}
		// A source that delivers out of order (a reader that lists after
		// it watched): only a document of the epoch it enforces, as a
		// source cannot hold a document of an epoch its ConfigMap never
		// held since.
		if p := pod(); p != nil && p.running && p.caller == c && p.doc != nil && p.doc.epoch == d.epoch {
			if p.read(d, w.now) {
				w.note("%s read the old document %s/%d late: %d", p.key, d.epoch, d.revision, p.limit)
			}
		}
	case 7: // a pod force-deleted, its process still running
		if p := pod(); p != nil && p.object && !p.unseen {
			p.object = false
			p.killAt = w.now.Add(time.Duration(w.rng.Int64N(int64(simDelay))))
			w.note("%s force-deleted; its process ends at %v", p.key, p.killAt.Sub(w.now))
		}
	case 8: // a caller turned away, or back
		c := w.rng.IntN(w.callers)
		w.away[c] = !w.away[c]
		w.note("caller %d away %v", c, w.away[c])
	case 9: // publications fail, or work again
		w.fail = !w.fail
		w.note("publications fail: %v", w.fail)
	case 10: // another replica, its clock off
		// By up to a quarter of a second either way: a lost record
		// restarts its revisions above the clock, which holds across
		// replicas only while their clocks agree better than the time
		// between two incarnations of an epoch.
		w.clock = fmt.Sprintf("replica-%d", w.rng.IntN(1000))
		w.skew = time.Duration(w.rng.Int64N(int64(500*time.Millisecond))) - 250*time.Millisecond
		w.note("operator now %s, clock off by %v", w.clock, w.skew)
	case 11: // a pod relabelled out of its workload, its process running
		if p := pod(); p != nil && p.object {
			p.relabelled = true
			w.note("%s relabelled out of its workload", p.key)
		}
	}
}

// ordered reports whether every running process of caller c has put a
// document of epoch in force, and so refuses an older one of it.
func (w *world) ordered(c int, epoch string) bool {
	for _, p := range w.pods {
		if p.running && p.caller == c {
			if _, ok := p.seen[epoch]; !ok {
				return false
			}
		}
	}
	return true
}

// worldParams choose a world.
type worldParams struct {
	seed      uint64
	total     int64
	ticks     int
	events    int // in 10 ticks
	attacks   int // in 10 ticks
	acksShare int // in 10 pods
	callers   int
	// cutOffs cuts pods that do not acknowledge off from their plan
	// source now and then (see cutOff).
	cutOffs bool
	noLapse bool // pods cut off from their source keep their limit
	// namesakes creates pods again under the names of gone ones (see
	// recreate).
	namesakes bool
}

// runWorld plays one world: ticks of events and attacks, checking at every
// tick that the pods cannot enforce more than the total; then stills it
// (no attack, every publication through, pods that leave gone) and checks
// that the division converges: every permit held by the Ready pods, each
// caller's pods holding its fair part.
func runWorld(fail func(format string, args ...any), p worldParams) {
	w := newWorld(p.seed, p.total, p.callers)
	w.noLapse = p.noLapse
	check := func(phase string, tick int) {
		if n, parts := w.enforceable(); n > w.total {
			fail("seed %d, %s tick %d: the pods can enforce %d > %d: %s\n%s", p.seed, phase, tick, n, w.total, parts, strings.Join(w.log, "\n"))
		}
	}
	for tick := range p.ticks {
		w.now = w.now.Add(simTick)
		if w.rng.IntN(10) < p.events {
			w.event(p.acksShare)
		}
		if w.rng.IntN(10) < p.attacks {
			w.attack()
		}
		if p.cutOffs {
			w.cutOff(p.attacks)
		}
		if p.namesakes {
			w.recreate(p.acksShare)
		}
		w.processes()
		check("moving, pods", tick)
		if w.rng.IntN(5) > 0 { // the controller lags now and then
			w.controller()
		}
		check("moving, operator", tick)
	}

	// Still: nothing more goes wrong; leaving pods finish and go. A pod
	// that does not acknowledge but carries a stale or forged annotation
	// looks like one that does, and stalls (HandoverStalled says so): its
	// people declare what it does.
	w.fail, w.away = false, [2]bool{}
	for _, pod := range w.pods {
		if !pod.cutAt.IsZero() {
			pod.cutUntil = w.now
		}
		if pod.leaving {
			pod.closed = true
		}
		pod.declared = DeclaredSilent
		if pod.acks {
			pod.declared = DeclaredAcknowledging
			// Likewise an acknowledging pod whose annotation was forged
			// over its own stalls until it acknowledges a newer document,
			// which a still division may never publish: its people put
			// its own annotation back (the runtime writes it again).
			pod.ackedDoc = nil
		}
	}
	for tick := range 90 {
		w.now = w.now.Add(simTick)
		w.processes()
		for _, pod := range w.pods {
			if pod.object && pod.leaving && (pod.ann != nil && pod.ann.released || !pod.acks && pod.inflight == 0) {
				pod.object, pod.running, pod.inflight, pod.limit = false, false, 0, 0
			}
		}
		w.controller()
		check("still", tick)
	}
	rec := w.records[w.cur]
	var serving, held int64
	heldBy := make([]int64, w.callers)
	servingIn := make([]bool, w.callers)
	for _, pod := range w.pods {
		if pod.member() && pod.ready && !pod.leaving {
			serving++
			held += rec.Records[pod.key].Told
			heldBy[pod.caller] += rec.Records[pod.key].Told
			servingIn[pod.caller] = true
		}
	}
	if serving > 0 && held != w.total {
		fail("seed %d: still world: Ready pods hold %d of %d: %+v\n%s", p.seed, held, w.total, rec.Records, strings.Join(w.log, "\n"))
	}
	for c := range w.callers {
		if servingIn[c] && heldBy[c] != w.parts[c] {
			fail("seed %d: still world: caller %d's pods hold %d, its part is %d (parts %v, demands %v)", p.seed, c, heldBy[c], w.parts[c], w.parts, w.demand)
		}
	}
}
