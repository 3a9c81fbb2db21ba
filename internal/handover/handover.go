package handover

import (
	"cmp"
	"slices"
	"time"
)

// Record is one pod's handover state, kept from one Step to the next (the
// controller keeps it in the quota's status, written before the pods are
// told anything, so that a restart never forgets what a pod may hold).
type Record struct {
	// Told is the pod's permits in the published document.
	Told int64
	// Holds is the most the pod may still hold: at least Told, and more
	// while the pod has not acknowledged a smaller share.
	Holds int64
	// ShrunkAt is the revision that told the pod its latest smaller share,
	// while Holds > Told; 0 when nothing is pending.
	ShrunkAt int64
	// ShrunkTime is when the delay of a pod that does not acknowledge
	// started counting: when revision ShrunkAt was decided, or later, when
	// it had not been published yet as the delay passed, or when the pod
	// was found gone; zero when ShrunkAt is.
	ShrunkTime time.Time
	// Acknowledges is set, while Holds > Told, for a pod known to
	// acknowledge (it declared so, or acknowledged a revision of the
	// epoch): only its acknowledgement frees its old share, however long
	// it takes. A removed or garbled annotation does not clear it.
	Acknowledges bool
	// Gone is set, while Holds > Told, for a pod whose object no longer
	// exists: its process may still run (a force deletion, a partitioned
	// node), and is taken to have ended once UnacknowledgedDelay has passed
	// since ShrunkTime, when it was found gone.
	Gone bool
	// Released is set, while Holds > Told, for a pod that released its
	// share (it closed its gate with nothing in flight): what it released
	// stays counted under its name until no document its caller's pods can
	// read gives the name anything (Pod.Readable is 0). Documents name
	// pods, not processes: a pod created again under the name, as a
	// StatefulSet does, enforces what an older document gives the name
	// until it reads a newer one.
	Released bool
}

// Bound is the most the pod may hold in flight: the larger of what it is
// told and what it may still hold.
func (r Record) Bound() int64 { return max(r.Told, r.Holds) }

// Declaration is what a pod declared of its acknowledgements.
type Declaration int

const (
	// Undeclared is a pod that said nothing: it is taken to acknowledge once it
	// has acknowledged a revision of the epoch.
	Undeclared Declaration = iota
	// DeclaredAcknowledging is a pod that said it acknowledges: its smaller shares are
	// settled by its acknowledgement only.
	DeclaredAcknowledging
	// DeclaredSilent is a pod that said it does not acknowledge: its smaller shares are
	// settled by UnacknowledgedDelay after their publication.
	DeclaredSilent
)

// Pod is what Step knows of one pod.
type Pod struct {
	// Key identifies the pod among all the pods of the division (its name,
	// or namespace/quota/name when callers span namespaces); grants break
	// ties by it.
	Key string
	// Target is the share the pod should hold once the handover is done:
	// its exact share when it is Ready and not leaving, else 0.
	Target int64
	// Leaving is set for a pod that is terminating: it keeps what it was
	// told until it is gone or has released it.
	Leaving bool
	// Gone is set for a pod the record counts whose object no longer
	// exists. Its target is 0; what it may hold stays counted until
	// UnacknowledgedDelay has passed since it was found gone.
	Gone bool
	// Acked is the newest revision of this epoch the pod acknowledged; 0
	// when it has acknowledged none. An acknowledgement above the revision
	// the step starts from was never published and counts as none.
	Acked int64
	// Declared is what the pod declared of its acknowledgements.
	Declared Declaration
	// Released is set when the pod reported that it closed its gate and has
	// nothing in flight. It counts only for a pod that is Leaving.
	Released bool
	// Published is the newest revision of this epoch the pod can read in
	// its document; 0 when it can read none. The delay of a pod that does
	// not acknowledge counts only from a step that sees the revision that
	// told it its smaller share published.
	Published int64
	// Unreached is set for a pod whose document the division no longer
	// writes (its caller's quota was deleted, or now divides elsewhere):
	// no smaller share reaches it, so none is taken as applied by time;
	// what it holds counts until it releases it or is gone.
	Unreached bool
	// Readable is the most a document of the pod's gate in any ConfigMap
	// its caller's pods may read gives the pod's name (its entry, or the
	// base share of a document that does not name it); 0 when none gives
	// it anything. A share the pod released, or held when it went, stays
	// counted while it is above 0: a pod created again under the name
	// would enforce it.
	Readable int64
	// Record is the pod's state after the previous Step; the zero Record
	// for a pod that step did not know.
	Record Record
}

// premature reports whether the pod acknowledges a revision not published
// to it (the record is written before its documents, so that covers one
// from the future too): forged, or written ahead. One above MaxAckRevision
// is ignored altogether.
func (p Pod) premature() bool {
	return p.Acked > p.Published && p.Acked <= MaxAckRevision
}

// PublicationRecheck is how soon a step that keeps a released or gone
// pod's share counted while a document still gives its name a share asks
// to run again: the document the step publishes no longer gives it, and
// the operator's own publication wakes no step.
const PublicationRecheck = time.Second

// acknowledges reports whether only the pod's acknowledgement frees an old
// share it holds: what it declared, or else whether it has acknowledged a
// revision of the epoch, now or when its shrink was recorded.
func (p Pod) acknowledges(acked int64) bool {
	switch p.Declared {
	case DeclaredAcknowledging:
		return true
	case DeclaredSilent:
		return false
	}
	return p.Record.Acknowledges || acked > 0
}

// Input is one step of the handover.
type Input struct {
	// Total is the most all the pods together may hold.
	Total int64
	// Revision is the revision the previous Step returned; 0 before the
	// first. Revisions are never reused: see Resume.
	Revision int64
	// Fresh is set when the step must publish a new revision even when no
	// share changes: the record started afresh, or took pods to hold more
	// than they are told until they acknowledge the next revision (see
	// Resume: Resumed.Fresh or Resumed.Learned).
	Fresh bool
	// Now is the time of the step.
	Now time.Time
	// UnacknowledgedDelay is how long after a pod that does not
	// acknowledge was told a smaller share it is taken to have applied it
	// and drained to it.
	UnacknowledgedDelay time.Duration
	// Pods are every pod that exists. A pod that is gone is simply left
	// out: what it held went with it.
	Pods []Pod
}

// Result is the handover after one step: what every pod is told and may
// hold.
type Result struct {
	// Revision is Input.Revision, one more when any pod is told something
	// new (and then above every acknowledgement of a revision not yet
	// published to its pod), and at least 1.
	Revision int64
	// Records are the pods' new states, aligned with Input.Pods.
	Records []Record
	// Changed is set when any pod is told something new, so the document
	// must be published again.
	Changed bool
	// Free is what no pod is told nor may hold: Total − Σ Bound, negative
	// while pods hold more than Total allows (after Total shrank).
	Free int64
	// RecheckAfter is, when positive, how long until the smaller share of a
	// pod that does not acknowledge counts as applied — told smaller in this
	// step or an earlier one; a step then may grant more.
	RecheckAfter time.Duration
}

// Step settles what the pods have acknowledged, tells every pod above its
// target its smaller share, and grants pods below their target as much as
// is free. See the package documentation for the rules and guarantees.
func Step(in Input) Result {
	out := Result{Revision: max(in.Revision, 0), Records: make([]Record, len(in.Pods))}
	next := out.Revision + 1
	for _, p := range in.Pods {
		if p.premature() {
			// No revision up to an acknowledgement seen before it was
			// published is ever published from now on: once published,
			// the annotation could not be told from a true one.
			next = max(next, p.Acked+1)
		}
	}
	recheck := func(wait time.Duration) { out.RecheckAfter = Sooner(out.RecheckAfter, max(wait, time.Nanosecond)) }
	republish := false

	// Settle acknowledgements and delays; tell smaller shares.
	for i, p := range in.Pods {
		r := p.Record
		r.Holds = max(r.Holds, r.Told)
		acked := p.Acked
		if acked > out.Revision || acked > p.Published {
			// Never published, or not to this pod: from the future, or
			// forged. Counted once published, it would acknowledge a
			// revision the pod never read.
			acked = 0
			if p.premature() && r.Holds > r.Told && r.ShrunkAt <= p.Acked {
				// Its smaller share is told again above it, and only an
				// acknowledgement of that revision settles it.
				r.ShrunkAt, republish = next, true
			}
		}
		acknowledges := p.acknowledges(acked)
		if (r.Released || r.Gone) && r.Holds > r.Told && !p.Gone && (!p.Leaving || !p.Released) {
			// Another pod under the name of one that released its share or
			// went (a StatefulSet's): it may have read a document that gave
			// the name a share, and lets go of it as of any smaller share,
			// by acknowledging a revision published from now on, which
			// this step publishes, or by the delay once it is published.
			r.Released, r.Gone = false, false
			r.ShrunkAt, r.ShrunkTime, republish = next, in.Now, true
		}
		if p.Leaving && p.Released && !r.Released && r.Holds > 0 {
			// Nothing is in flight, but a pod created again under its name
			// would enforce what the documents still give the name: it is
			// told nothing, and what it held counts until no document
			// gives the name anything.
			if r.Told > 0 || r.ShrunkAt <= 0 {
				r.ShrunkAt = next
			}
			r.Told, r.Released, r.Gone, r.ShrunkTime = 0, true, false, in.Now
		}
		if p.Gone && !r.Gone && !r.Released && r.Holds > 0 {
			// Found gone: its process is taken to end within the delay
			// from now, whether or not it acknowledges.
			r.Gone, r.ShrunkTime = true, in.Now
			r.ShrunkAt = max(r.ShrunkAt, next)
		}
		r.Gone = r.Gone && p.Gone
		switch {
		case r.Released:
			if p.Readable > 0 {
				r.ShrunkTime = in.Now
				recheck(PublicationRecheck)
			} else {
				r = Record{}
			}
		case r.Holds == r.Told:
		case acked > 0 && acked >= r.ShrunkAt:
			r = Record{Told: r.Told, Holds: r.Told}
		case p.Unreached && !r.Gone:
			// Nothing tells it its smaller share: only its release, or
			// its going, frees what it holds.
		case !r.Gone && !acknowledges && p.Published < r.ShrunkAt:
			// The revision that told it has not been seen published: its
			// delay counts from now at the earliest, as it may be
			// published now.
			r.ShrunkTime = in.Now
			recheck(in.UnacknowledgedDelay)
		case r.Gone || !acknowledges:
			if wait := r.ShrunkTime.Add(in.UnacknowledgedDelay).Sub(in.Now); wait > 0 {
				recheck(wait)
			} else if r.Gone && p.Readable > 0 {
				// Its process has ended, but a pod created again under
				// its name would enforce what a document gives the name.
				recheck(PublicationRecheck)
			} else {
				r = Record{Told: r.Told, Holds: r.Told}
			}
		}
		if !p.Leaving && p.Target < r.Told {
			r.Told = max(p.Target, 0)
			r.ShrunkAt = next
			if !r.Gone {
				r.ShrunkTime = in.Now
			}
			if (!acknowledges || r.Gone) && !p.Unreached && r.Holds > r.Told {
				// Only time settles this pod's smaller share: say when,
				// or it would wait for an unrelated event.
				recheck(in.UnacknowledgedDelay)
			}
		}
		if r.Holds == r.Told {
			r.ShrunkAt, r.ShrunkTime, r.Acknowledges, r.Gone, r.Released = 0, time.Time{}, false, false, false
		} else {
			r.Acknowledges = acknowledges && !r.Released
		}
		out.Records[i] = r
	}

	out.Free = in.Total
	for _, r := range out.Records {
		out.Free -= r.Bound()
	}
	if out.Free < 0 {
		withholdUnread(in, &out, next)
	}

	grant(in, &out)

	for i, r := range out.Records {
		if r.Told != in.Pods[i].Record.Told {
			out.Changed = true
		}
	}
	if out.Changed || out.Revision == 0 || in.Fresh || republish {
		out.Revision = next
	}
	return out
}

// withholdUnread takes back, while the pods may hold more than Total, every
// share a record tells a pod above what any document it can read gives it
// (Pod.Readable): a grant never published. It was counted, and publishing
// it now is safe only while the pods hold no more than the record says;
// when they may hold more (Total shrank, or the record was rolled back to a
// copy whose grants never reached the pods while they enforce what a later
// copy published), publishing it would give the pod capacity nobody
// counted as free. The pod keeps it counted until it acknowledges the next
// revision or the delay passes, and is granted it again from what is free.
func withholdUnread(in Input, out *Result, next int64) {
	for i, p := range in.Pods {
		r := &out.Records[i]
		if p.Gone || r.Told <= max(p.Readable, 0) {
			continue
		}
		r.Holds = max(r.Holds, r.Told)
		r.Told = max(p.Readable, 0)
		r.ShrunkAt, r.ShrunkTime = next, in.Now
		r.Acknowledges = p.acknowledges(0) && !r.Released
	}
}

// grant grants what out.Free leaves to the pods below their target, those
// told the least first.
func grant(in Input, out *Result) {
	var below []int
	for i, p := range in.Pods {
		if !p.Leaving && !p.Gone && p.Target > out.Records[i].Told {
			below = append(below, i)
		}
	}
	slices.SortFunc(below, func(a, b int) int {
		return cmp.Or(cmp.Compare(out.Records[a].Told, out.Records[b].Told), cmp.Compare(in.Pods[a].Key, in.Pods[b].Key))
	})
	if out.Free < 0 {
		// The pods may hold more than Total (it shrank, or a record started
		// afresh counts what every source says they may hold): only
		// smaller shares are told until they fit.
		below = nil
	}
	for _, i := range below {
		r := &out.Records[i]
		// Up to Holds costs nothing: the pod is counted at Holds already.
		told := min(in.Pods[i].Target, r.Holds+out.Free)
		if told <= r.Told {
			continue
		}
		out.Free -= max(0, told-r.Holds)
		r.Told, r.Holds = told, max(r.Holds, told)
		if r.Holds == r.Told {
			r.ShrunkAt, r.ShrunkTime, r.Acknowledges, r.Gone, r.Released = 0, time.Time{}, false, false, false
		}
	}
}

// Sooner returns the sooner of two recheck delays, where 0 is none: the
// RecheckAfter of a step and a caller's own.
func Sooner(recheck, wait time.Duration) time.Duration {
	if wait > 0 && (recheck == 0 || wait < recheck) {
		return wait
	}
	return recheck
}
