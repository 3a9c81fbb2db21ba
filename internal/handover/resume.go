package handover

import (
	"maps"
	"time"
)

// MaxAckRevision bounds the revisions of acknowledgements that Resume takes
// as seen. A legitimate acknowledgement names a published revision, far
// below it; one above it (a forged or garbled annotation) is ignored, so
// that no pod can push a division's revisions to the end of their range.
const MaxAckRevision = 1 << 52

// maxSeenRevision bounds the revisions of documents that Resume takes as
// seen: twice MaxAckRevision, so that the revisions the division reaches by
// starting or stepping above an acknowledgement (up to MaxAckRevision) are
// seen, and one a hand-written document pushes to the end of the range is
// not.
const maxSeenRevision = 2 * MaxAckRevision

// Snapshot is a division's record as read back: the revision last
// published and every pod's Record, by key.
type Snapshot struct {
	// Epoch is the division's epoch.
	Epoch string
	// Revision is the revision the record was written at.
	Revision int64
	// Clock names the operator process whose clock stamped the records'
	// ShrunkTime.
	Clock string
	// Records are the pods' records, by key.
	Records map[string]Record
}

// Trace is what can be seen of a division outside its record.
type Trace struct {
	// Revisions are the revisions of the division's epoch of the documents
	// published to the pods (those above twice MaxAckRevision are
	// ignored).
	Revisions []int64
	// Acked are the revisions of the division's epoch the pods'
	// annotations acknowledge. Anyone who may annotate a pod can write
	// one, so they never make a record look behind; a fresh record starts
	// above them (those up to MaxAckRevision), so that no revision an
	// acknowledgement names is published again.
	Acked []int64
	// Learned maps a pod's key to the most that what comes from elsewhere
	// gives it: a document of another epoch its caller's pods read, a record
	// of another epoch, while they read it. It is what a pod the record does
	// not know may hold.
	Learned map[string]int64
	// Own maps a pod's key to the most that a document of this epoch gives
	// it, with what the document says it may still hold: what a fresh
	// record starts from.
	Own map[string]int64
	// Reads maps a pod's key to what the document it reads now gives it (0
	// when that document does not name it); a pod that reads none is not
	// in it.
	Reads map[string]int64
	// Elsewhere is set when the pods of a caller of the division read a
	// document of another epoch: the division comes to their ConfigMap
	// from another, or back to it. Revisions of its own epoch published
	// before it went may be remembered by pods while nothing shows them any
	// more, and its record may have been rolled back meanwhile.
	Elsewhere bool
}

// Resumed is where the next Step starts from.
type Resumed struct {
	// Records are the pods' records, by key.
	Records map[string]Record
	// Revision is the revision to step from (Input.Revision).
	Revision int64
	// Fresh is set when the record starts afresh.
	Fresh bool
	// Learned is set when a pod was taken to hold more than it is told,
	// waiting for an acknowledgement of the next revision, or when the
	// division comes back to pods reading another epoch's document
	// (Trace.Elsewhere): that revision must be published even when no
	// share changes (Input.Fresh).
	Learned bool
	// Restamped is set when a delay was started again: the record's clock
	// was another's, or a record holding more than told lacked its time.
	Restamped bool
}

// Resume returns where the next Step of a division of epoch starts from,
// given its record as read back (nil when there is none) and what can be
// seen outside it, at now on the clock named clock.
//
// A record is started afresh when there is none, it is of another epoch,
// or it is behind: a document of its epoch names a revision above its own
// (the record was deleted, edited, restored from a backup, or rolled back
// by a re-apply). An acknowledgement above the record's revision does not
// make it behind: anyone who may annotate a pod can write one, and a fresh
// record would take every pod to hold what the documents say. A fresh
// record starts above every revision of the epoch seen, acknowledged ones
// included, and, unless nothing at all of a division was
// there before (a new epoch's first record), above the clock in
// milliseconds, so that no revision is ever published twice, no old
// acknowledgement acknowledges a new revision, and a pod that remembers a
// revision of an earlier incarnation of the epoch takes the new ones; and, as
// Doorman's server does after a restart, it takes every pod to hold what
// the published documents and the records of other epochs give it, until
// the pod acknowledges a smaller share or the delay passes.
//
// A pod the record does not know is taken to hold what Trace.Learned gives
// it, fresh record or not: a pod of a caller that just joined may still
// enforce the document of the division it came from. What the division's
// own documents say (Trace.Own) counts only for a fresh record: a current
// one drops a pod once it holds nothing, and knows better.
//
// Delays are counted on one clock: when the record was stamped by another
// operator process's clock (another replica took over), every pending
// delay starts again now. A pending record without a revision or a time
// (hand-edited) waits for an acknowledgement of the next revision and its
// delay counts from now.
func Resume(epoch string, rec *Snapshot, t Trace, now time.Time, clock string) Resumed {
	var seen, acked int64
	for _, r := range t.Revisions {
		if r <= maxSeenRevision {
			seen = max(seen, r)
		}
	}
	for _, r := range t.Acked {
		if r <= MaxAckRevision {
			acked = max(acked, r)
		}
	}
	out := Resumed{Records: map[string]Record{}}
	restamp := false
	if rec != nil && rec.Epoch == epoch {
		maps.Copy(out.Records, rec.Records)
		out.Revision = max(rec.Revision, 0)
		out.Fresh = seen > out.Revision
		restamp = rec.Clock != clock
	} else {
		out.Fresh = true
	}
	if out.Fresh {
		out.Revision = max(out.Revision, seen, acked)
		if rec != nil || out.Revision > 0 || len(t.Learned) > 0 || len(t.Own) > 0 || len(t.Reads) > 0 {
			// Something of a division was here before: revisions of this
			// epoch may have been published that nothing shows any more
			// (an earlier incarnation of the epoch, switched away from and
			// back), and pods remember them. Starting above the clock in
			// milliseconds starts above them all, as long as an epoch
			// published less than one revision a millisecond on average.
			out.Revision = max(out.Revision, now.UnixMilli())
		}
	}
	if t.Elsewhere && !out.Fresh {
		// The division comes back to pods that read another epoch's
		// document: they may remember revisions of this epoch above its
		// record (rolled back while it was away), which they would refuse
		// to go below. Above the clock is above them, as for a fresh
		// record; and the revision is published, so that the pods read
		// the division's own document.
		out.Revision, out.Learned = max(out.Revision, now.UnixMilli()), true
	}
	next := out.Revision + 1
	for key, r := range out.Records {
		r.Holds = max(r.Holds, r.Told)
		if r.Holds > r.Told {
			if r.ShrunkAt <= 0 {
				r.ShrunkAt, out.Restamped, out.Learned = next, true, true
			}
			if r.ShrunkTime.IsZero() || restamp {
				r.ShrunkTime, out.Restamped = now, true
			}
		}
		out.Records[key] = r
	}
	learn := func(key string) {
		r, known := out.Records[key]
		if known && !out.Fresh {
			return // the record knows better than any document
		}
		reads, ok := t.Reads[key]
		holds := max(r.Bound(), t.Learned[key], reads)
		if out.Fresh {
			holds = max(holds, t.Own[key])
		}
		if holds <= 0 {
			return
		}
		// A fresh record takes what it is told from the document it
		// reads. A current record knows better: a pod it does not know is
		// told nothing yet, whatever the document it reads says (one of
		// another division, or an old one of this division written back),
		// and Step grants it up to what it may hold at no cost.
		r.Told = 0
		if ok && out.Fresh {
			r.Told = reads
		}
		r.Holds = holds
		if r.Holds > r.Told {
			// It lets go of what it may hold above what it reads by
			// acknowledging a revision of this record, or by the delay:
			// no acknowledgement of an earlier record says what it holds.
			r.ShrunkAt, r.ShrunkTime, out.Learned = next, now, true
		} else {
			r.ShrunkAt, r.ShrunkTime, r.Acknowledges, r.Gone = 0, time.Time{}, false, false
		}
		out.Records[key] = r
	}
	for key := range t.Learned {
		learn(key)
	}
	for key := range t.Reads {
		learn(key)
	}
	if out.Fresh {
		for key := range t.Own {
			learn(key)
		}
		for key := range out.Records {
			learn(key)
		}
	}
	return out
}
