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
	// ShrunkTime is when revision ShrunkAt was decided; zero when ShrunkAt is.
	ShrunkTime time.Time
}

// Bound is the most the pod may hold in flight: the larger of what it is
// told and what it may still hold.
func (r Record) Bound() int64 { return max(r.Told, r.Holds) }

// Pod is what Step knows of one pod.
type Pod struct {
	// Key identifies the pod among all the pods of the division (its name,
	// or namespace/name when callers span namespaces); grants break ties by
	// it.
	Key string
	// Target is the share the pod should hold once the handover is done:
	// its exact share when it is Ready and not leaving, else 0.
	Target int64
	// Leaving is set for a pod that is terminating: it keeps what it was
	// told until it is gone or has released it.
	Leaving bool
	// Acked is the newest revision of this epoch the pod acknowledged; 0
	// when it has acknowledged none. A pod that has acknowledged something
	// is taken to acknowledge every revision; one that never has is taken
	// not to acknowledge at all.
	Acked int64
	// Released is set when the pod reported that it closed its gate and has
	// nothing in flight. It counts only for a pod that is Leaving.
	Released bool
	// Record is the pod's state after the previous Step; the zero Record
	// for a pod that step did not know.
	Record Record
}

// Input is one step of the handover.
type Input struct {
	// Total is the most all the pods together may hold.
	Total int64
	// Revision is the revision the previous Step returned; 0 before the
	// first.
	Revision int64
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
	// new, and at least 1.
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

	// Settle acknowledgements and delays; tell smaller shares.
	for i, p := range in.Pods {
		r := p.Record
		r.Holds = max(r.Holds, r.Told)
		switch {
		case p.Leaving && p.Released:
			r = Record{}
		case r.ShrunkAt > 0 && p.Acked > 0:
			if p.Acked >= r.ShrunkAt {
				r = Record{Told: r.Told, Holds: r.Told}
			}
		case r.ShrunkAt > 0:
			if wait := r.ShrunkTime.Add(in.UnacknowledgedDelay).Sub(in.Now); wait <= 0 {
				r = Record{Told: r.Told, Holds: r.Told}
			} else {
				out.RecheckAfter = Sooner(out.RecheckAfter, wait)
			}
		}
		if !p.Leaving && p.Target < r.Told {
			r.Told = max(p.Target, 0)
			r.ShrunkAt, r.ShrunkTime = next, in.Now
			if p.Acked == 0 && r.Holds > r.Told {
				// Only time settles this pod's smaller share: say when,
				// or it would wait for an unrelated event.
				out.RecheckAfter = Sooner(out.RecheckAfter, max(in.UnacknowledgedDelay, time.Nanosecond))
			}
		}
		if r.Holds == r.Told {
			r.ShrunkAt, r.ShrunkTime = 0, time.Time{}
		}
		out.Records[i] = r
	}

	out.Free = in.Total
	for _, r := range out.Records {
		out.Free -= r.Bound()
	}

	// Grant what is free, to the pods that hold the least first.
	var below []int
	for i, p := range in.Pods {
		if !p.Leaving && p.Target > out.Records[i].Told {
			below = append(below, i)
		}
	}
	slices.SortFunc(below, func(a, b int) int {
		return cmp.Or(cmp.Compare(out.Records[a].Told, out.Records[b].Told), cmp.Compare(in.Pods[a].Key, in.Pods[b].Key))
	})
	for _, i := range below {
		r := &out.Records[i]
		// Up to Holds costs nothing: the pod is counted at Holds already.
		told := min(in.Pods[i].Target, r.Holds+max(out.Free, 0))
		if told <= r.Told {
			continue
		}
		out.Free -= max(0, told-r.Holds)
		r.Told, r.Holds = told, max(r.Holds, told)
	}

	for i, r := range out.Records {
		if r.Told != in.Pods[i].Record.Told {
			out.Changed = true
		}
	}
	if out.Changed || out.Revision == 0 {
		out.Revision = next
	}
	return out
}

// Sooner returns the sooner of two recheck delays, where 0 is none: the
// RecheckAfter of a step and a caller's own.
func Sooner(recheck, wait time.Duration) time.Duration {
	if wait > 0 && (recheck == 0 || wait < recheck) {
		return wait
	}
	return recheck
}
