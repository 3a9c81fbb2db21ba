package handover

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestResume(t *testing.T) {
	now := t0.Add(time.Hour)
	ms := now.UnixMilli() // a fresh record where a division was starts above the clock
	steady := func(n int64) Record { return Record{Told: n, Holds: n} }
	for _, c := range []struct {
		name  string
		rec   *Snapshot
		trace Trace
		want  Resumed
	}{
		{
			name: "no record: above every revision seen, holding what the documents give",
			trace: Trace{Revisions: []int64{57, 12}, Learned: map[string]int64{"a": 20, "b": 20, "c": 0, "d": 9},
				Reads: map[string]int64{"a": 20, "b": 20, "c": 0, "d": 4}},
			want: Resumed{Fresh: true, Learned: true, Revision: ms, Records: map[string]Record{
				"a": steady(20), "b": steady(20), "d": {Told: 4, Holds: 9, ShrunkAt: ms + 1, ShrunkTime: now},
			}},
		},
		{
			name:  "record of another epoch",
			rec:   &Snapshot{Epoch: "other", Revision: 90, Records: map[string]Record{"a": steady(5)}},
			trace: Trace{Revisions: []int64{3}},
			want:  Resumed{Fresh: true, Revision: ms, Records: map[string]Record{}},
		},
		{
			name: "record behind a document: rolled back, merged with what the document gives",
			rec: &Snapshot{Epoch: "E", Revision: 5, Clock: "me", Records: map[string]Record{
				"a": steady(20), "b": {Told: 10, Holds: 20, ShrunkAt: 5, ShrunkTime: t0},
			}},
			trace: Trace{Revisions: []int64{9}, Learned: map[string]int64{"a": 14, "b": 13, "c": 13},
				Reads: map[string]int64{"a": 14, "b": 13, "c": 13}},
			want: Resumed{Fresh: true, Learned: true, Revision: ms, Records: map[string]Record{
				"a": {Told: 14, Holds: 20, ShrunkAt: ms + 1, ShrunkTime: now}, "b": {Told: 13, Holds: 20, ShrunkAt: ms + 1, ShrunkTime: now}, "c": steady(13),
			}},
		},
		{
			name:  "current record: an acknowledgement above its revision does not make it behind",
			rec:   &Snapshot{Epoch: "E", Revision: 9, Clock: "me", Records: map[string]Record{"a": steady(5)}},
			trace: Trace{Revisions: []int64{9}, Acked: []int64{12}, Own: map[string]int64{"a": 40}, Reads: map[string]int64{"a": 40}},
			want:  Resumed{Revision: 9, Records: map[string]Record{"a": steady(5)}},
		},
		{
			name: "current record back from another epoch: above the clock, its pods told nothing until they acknowledge it",
			rec:  &Snapshot{Epoch: "E", Revision: 9, Clock: "me", Records: map[string]Record{}},
			trace: Trace{Elsewhere: true, Learned: map[string]int64{"a": 20},
				Reads: map[string]int64{"a": 20}},
			want: Resumed{Revision: ms, Learned: true, Records: map[string]Record{
				"a": {Holds: 20, ShrunkAt: ms + 1, ShrunkTime: now},
			}},
		},
		{
			name:  "record behind a document above MaxAckRevision, reached by stepping above an acknowledgement",
			rec:   &Snapshot{Epoch: "E", Revision: 9, Clock: "me", Records: map[string]Record{}},
			trace: Trace{Revisions: []int64{MaxAckRevision + 1}},
			want:  Resumed{Fresh: true, Revision: MaxAckRevision + 1, Records: map[string]Record{}},
		},
		{
			name:  "fresh record: above the acknowledgements too",
			trace: Trace{Revisions: []int64{3}, Acked: []int64{7, MaxAckRevision + 1}},
			want:  Resumed{Fresh: true, Revision: ms, Records: map[string]Record{}},
		},
		{
			name: "current record: known pods as recorded, unknown ones told nothing yet, holding what they may",
			rec:  &Snapshot{Epoch: "E", Revision: 9, Clock: "me", Records: map[string]Record{"a": steady(5)}},
			trace: Trace{Revisions: []int64{9, 9, 2*MaxAckRevision + 1, 1 << 62},
				Learned: map[string]int64{"a": 20, "joined": 7, "elsewhere": 3}, Reads: map[string]int64{"a": 5, "joined": 7}},
			want: Resumed{Revision: 9, Learned: true, Records: map[string]Record{
				"a": steady(5), "joined": {Told: 0, Holds: 7, ShrunkAt: 10, ShrunkTime: now}, "elsewhere": {Told: 0, Holds: 3, ShrunkAt: 10, ShrunkTime: now},
			}},
		},
		{
			name: "stamped by another clock: pending delays start again",
			rec: &Snapshot{Epoch: "E", Revision: 9, Clock: "other", Records: map[string]Record{
				"a": {Told: 1, Holds: 5, ShrunkAt: 8, ShrunkTime: t0}, "b": steady(3),
			}},
			want: Resumed{Revision: 9, Restamped: true, Records: map[string]Record{
				"a": {Told: 1, Holds: 5, ShrunkAt: 8, ShrunkTime: now}, "b": steady(3),
			}},
		},
		{
			name: "pending without a revision or a time",
			rec: &Snapshot{Epoch: "E", Revision: 9, Clock: "me", Records: map[string]Record{
				"a": {Told: 1, Holds: 5}, "b": {Told: 1, Holds: 5, ShrunkAt: 9},
			}},
			want: Resumed{Revision: 9, Restamped: true, Learned: true, Records: map[string]Record{
				"a": {Told: 1, Holds: 5, ShrunkAt: 10, ShrunkTime: now}, "b": {Told: 1, Holds: 5, ShrunkAt: 9, ShrunkTime: now},
			}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Resume("E", c.rec, c.trace, now, "me")
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestStepIgnoresAcknowledgementsFromTheFuture: an acknowledgement of a
// revision above the one the step starts from was never published.
func TestStepIgnoresAcknowledgementsFromTheFuture(t *testing.T) {
	in := Input{Total: 10, Revision: 6, Now: t0, Pods: []Pod{
		{Key: "a", Target: 5, Acked: 1 << 62, Published: 6, Record: Record{Told: 5, Holds: 10, ShrunkAt: 6, ShrunkTime: t0, Acknowledges: true}},
		{Key: "b", Target: 5, Acked: 6, Published: 6},
	}}
	if got := Step(in); got.Records[0].Holds != 10 || got.Records[1].Told != 0 {
		t.Fatalf("an acknowledgement from the future settled a share: %+v", got)
	}
}

// TestStepDeclaredAcknowledging waits for the acknowledgement of a pod that
// declared it acknowledges, however long; one that declared it does not is
// settled by the delay, and so is one that said nothing and never
// acknowledged.
func TestStepDeclaredAcknowledging(t *testing.T) {
	for _, c := range []struct {
		declared Declaration
		settled  bool
	}{
		{DeclaredAcknowledging, false},
		{DeclaredSilent, true},
		{Undeclared, true},
	} {
		in := Input{Total: 10, Revision: 6, Now: t0.Add(time.Hour), UnacknowledgedDelay: time.Minute, Pods: []Pod{
			{Key: "a", Target: 5, Declared: c.declared, Published: 6, Record: Record{Told: 5, Holds: 10, ShrunkAt: 6, ShrunkTime: t0}},
		}}
		if got := Step(in); (got.Records[0].Holds == 5) != c.settled {
			t.Errorf("declared %d: %+v, want settled %v", c.declared, got.Records[0], c.settled)
		}
	}
}

// TestStepRemembersThatAPodAcknowledges keeps counting the old share of a
// pod that acknowledged a revision once its annotation is gone.
func TestStepRemembersThatAPodAcknowledges(t *testing.T) {
	in := Input{Total: 10, Revision: 6, Now: t0, UnacknowledgedDelay: time.Minute, Pods: []Pod{
		{Key: "a", Target: 5, Acked: 5, Published: 5, Record: Record{Told: 10, Holds: 10}},
		{Key: "b", Target: 5, Acked: 5, Published: 5},
	}}
	got := Step(in)
	if !got.Records[0].Acknowledges {
		t.Fatalf("the shrink of a pod that acknowledges does not say so: %+v", got.Records[0])
	}
	in.Revision, in.Now = got.Revision, t0.Add(time.Hour)
	in.Pods[0].Record, in.Pods[0].Acked, in.Pods[0].Published = got.Records[0], 0, got.Revision
	if got := Step(in); got.Records[0].Holds != 10 || got.Records[1].Told != 0 {
		t.Fatalf("a removed acknowledgement settled the share by time: %+v", got)
	}
}

// TestStepDelayCountsFromPublication does not settle by time a smaller
// share whose revision has not been seen published, and counts its delay
// from the step that finds the delay passed without it.
func TestStepDelayCountsFromPublication(t *testing.T) {
	late := t0.Add(10 * time.Minute)
	in := Input{Total: 10, Revision: 6, Now: late, UnacknowledgedDelay: time.Minute, Pods: []Pod{
		{Key: "a", Target: 5, Published: 5, Record: Record{Told: 5, Holds: 10, ShrunkAt: 6, ShrunkTime: t0}},
		{Key: "b", Target: 5},
	}}
	got := Step(in)
	want := Record{Told: 5, Holds: 10, ShrunkAt: 6, ShrunkTime: late}
	if diff := cmp.Diff(want, got.Records[0]); diff != "" || got.Records[1].Told != 0 || got.RecheckAfter != time.Minute {
		t.Fatalf("unpublished shrink: (-want +got):\n%s\n%+v", diff, got)
	}
	in.Pods[0].Record, in.Pods[0].Published = got.Records[0], 6
	in.Now = late.Add(30 * time.Second)
	if got := Step(in); got.Records[1].Told != 0 {
		t.Fatalf("settled before the delay after publication: %+v", got)
	}
	in.Now = late.Add(time.Minute)
	if got := Step(in); got.Records[1].Told != 5 {
		t.Fatalf("not settled once the delay after publication passed: %+v", got)
	}
}

// TestStepGonePod counts what a pod whose object is gone may hold until the
// delay has passed since it was found gone, even one that acknowledges.
func TestStepGonePod(t *testing.T) {
	in := Input{Total: 10, Revision: 6, Now: t0, UnacknowledgedDelay: time.Minute, Pods: []Pod{
		{Key: "a", Gone: true, Acked: 6, Published: 6, Record: Record{Told: 5, Holds: 5}},
		{Key: "b", Target: 10, Acked: 6, Published: 6, Record: Record{Told: 5, Holds: 5}},
	}}
	got := Step(in)
	want := Record{Told: 0, Holds: 5, ShrunkAt: 7, ShrunkTime: t0, Acknowledges: true, Gone: true}
	if diff := cmp.Diff(want, got.Records[0]); diff != "" || got.Records[1].Told != 5 || got.RecheckAfter != time.Minute {
		t.Fatalf("found gone: (-want +got):\n%s\n%+v", diff, got)
	}
	in.Revision, in.Pods[0].Record, in.Pods[1].Record = got.Revision, got.Records[0], got.Records[1]
	in.Now = t0.Add(59 * time.Second)
	if got := Step(in); got.Records[1].Told != 5 {
		t.Fatalf("a gone pod's share handed over before the delay: %+v", got)
	}
	in.Now = t0.Add(time.Minute)
	if got := Step(in); got.Records[0] != (Record{}) || got.Records[1].Told != 10 {
		t.Fatalf("a gone pod's share not handed over after the delay: %+v", got)
	}
}

// TestStepFreshRecordPublishes publishes a new revision for a fresh record
// even when no share changes.
func TestStepFreshRecordPublishes(t *testing.T) {
	in := Input{Total: 10, Revision: 57, Fresh: true, Now: t0, Pods: []Pod{{Key: "a", Target: 10, Record: Record{Told: 10, Holds: 10}}}}
	if got := Step(in); got.Revision != 58 || got.Changed {
		t.Fatalf("%+v", got)
	}
}
