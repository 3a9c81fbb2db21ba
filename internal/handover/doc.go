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
//     the smaller share), or, for a pod that has never acknowledged anything
//     in this epoch, until UnacknowledgedDelay has passed since it was told;
//   - a larger share is told only out of what is free: Total minus, over all
//     pods, the larger of what each is told and what it may still hold.
//     Grants go first to the pods that hold the least, then by key; a grant
//     may be partial;
//   - a pod that is leaving keeps its share until it is gone, or until it
//     reports that it released it (it closed its gate and drained);
//   - a pod that is not Ready has a target of 0: it receives no traffic and
//     needs no share until it is Ready.
//
// This is Doorman's rule (a grant never exceeds capacity minus what others
// have, plus what the client already has) with the pod's acknowledgement in
// the role of the lease holder's "has".
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
