// Package handover moves capacity between pods only after the pods giving
// it up have let go of it: the step protocol between the targets that
// internal/division computes and the shares the pods are told.
//
// It is pure: plain values in, plain values out, no Kubernetes types, no
// clock of its own. The controller gathers the facts (which pods exist,
// which are Ready, which are leaving, what each has acknowledged), computes
// the targets with division.Targets, calls Step, records the result in the
// quota's status and publishes each pod's share.
//
// # The step
//
// A pod is told a share (its permits in the published document) and may
// still hold more than it is told: after being told a smaller share, it
// finishes the calls it has in flight. Each pod's Record keeps what it was
// told (Told) and the most it may still hold (Holds ≥ Told). Step moves the
// pods one step towards their targets:
//
//   - a smaller share is told at once (shrinking is always safe); Holds stays
//     until the pod acknowledges a revision at least as new as the one that
//     told it (the runtime acknowledges once its calls in flight are within
//     the smaller share). An acknowledgement of a revision not published
//     to the pod counts as none, also once it is: no revision up to it is
//     published any more, and the pod's smaller share is told again above
//     it;
//   - a pod that does not acknowledge is taken to have applied its smaller
//     share once UnacknowledgedDelay has passed since the revision that told
//     it was published: the delay starts only when Pod.Published shows that
//     revision published, and a step that finds the delay passed without
//     it starts the delay again from then. Whether a pod acknowledges is
//     declared (Pod.Declared) or, when it is not, inferred: a pod that has
//     acknowledged a revision of the epoch acknowledges. The shrink's
//     Record remembers it (Acknowledges), so a removed or garbled
//     acknowledgement does not turn it into one settled by time;
//   - a larger share is told only out of what is free: Total minus, over all
//     pods, the larger of what each is told and what it may still hold.
//     Grants go first to the pods that hold the least, then by key; a grant
//     may be partial. While the pods may hold more than Total, nothing is
//     granted, not even up to what a pod may still hold;
//   - a pod that is leaving keeps its share until it is gone, or until it
//     reports that it released it (it closed its gate and drained); a
//     released share is told 0 and stays counted under the pod's name
//     (Record.Released) until no document its caller's pods may read gives
//     the name anything (Pod.Readable is 0): documents name pods, and a pod
//     created again under the name would enforce it;
//   - a pod that is gone (Pod.Gone: its object was deleted, or it left its
//     caller) has a target of 0; what it may hold counts until
//     UnacknowledgedDelay has passed since it was found gone, as its
//     process may still run, and until no document gives its name
//     anything;
//   - a pod found under the name of one that released its share or went
//     may have read a document that gave the name a share: it lets go of it
//     by acknowledging a revision published from then on, which the step
//     publishes, or by the delay once that revision is published;
//   - a pod that is not Ready has a target of 0: it receives no traffic and
//     needs no share until it is Ready.
//
// This is Doorman's rule (a grant never exceeds capacity minus what others
// have, plus what the client already has) with the pod's acknowledgement in
// the role of the lease holder's "has".
//
// # Resuming a record
//
// The controller keeps every pod's Record, written before any pod is told
// anything; Resume reads it back. A record that is missing, of another
// epoch, or behind (a document of its epoch names a higher revision: it
// was deleted, edited, restored or rolled back) starts afresh above every
// revision of the epoch that can be seen, acknowledged ones too, so revisions
// are never published twice, and takes every pod to hold what the
// published documents and the records of other epochs give it, until it
// acknowledges a revision of the fresh record or the delay passes: the
// learning mode of Doorman's server after a restart. A pod the record does
// not know is taken to hold what a document gives it in any case: a
// caller that just joined may still enforce its old division's document.
// A record that comes back to pods reading another epoch's document
// (Trace.Elsewhere) publishes above the clock too: it may have been rolled
// back while its division was away, and the pods remember revisions
// nothing shows. Delays are counted on one clock: a record stamped by
// another operator process starts every pending delay again.
//
// # Guarantees
//
// Checked by randomized tests over pod sets, readiness, acknowledgement
// orders and caller demands (≥ 10,000 cases from a fixed seed) and by the
// fuzz target FuzzHandover, which play pods, their processes and the
// controller against each other and count the calls really in flight:
//
//   - After every Step, Σ over pods of max(Told, Holds) ≤ Total whenever it
//     was so before the step; when it was not (the total shrank), Step only
//     shrinks until it is.
//   - Once the world is still (no new facts) and every pod acknowledges what
//     it was told, repeated Steps reach the targets: every permit of Total
//     is held by Ready pods.
//   - Step is deterministic: the same input gives the same result.
package handover
