// Package division splits a contract's usable permits over those who use
// them: over callers by weight and demand (FairShare, FairShareFloat), and
// over a caller's pods exactly, every permit handed out (Exact, Targets),
// or by each pod's measured demand with the reserve's slices as members
// (Follow); Even states the arithmetic of an exact division in the words
// every message, table and event quotes.
//
// It is pure: plain values in, plain values out, no Kubernetes types, no
// clock. The controller gathers the facts (which pods exist, which are
// Ready, which are leaving), calls Targets for each caller's part, and
// internal/handover moves the pods towards those targets only as fast as
// the pods giving capacity up let go of it.
//
// # Exact division
//
// With A usable permits and D Ready pods, Exact gives every pod
// floor(A/D) and A mod D of them one more, so the pods hold exactly A. The
// pods that get the extra permit are the ones that already hold the most
// (then by name), so a pod keeps its extra permit until it leaves or the
// arithmetic changes. With fewer permits than pods, A pods hold one permit
// and the rest none; AtLeastOne raises A to D first, and the caller reports
// the over-commitment.
//
// # Shares that follow demand
//
// Follow divides a caller's part by demand: the reserve (the permits the
// permit server lends per call) exactly over the permit server's Ready
// replicas, the rest over the Ready pods by max-min fairness capped at each
// pod's measured demand, every pod at least a floor, the surplus evenly —
// FairShare with every weight 1. A band keeps the previous division while
// no pod's fresh target is far from it, so that the noise of a measured
// demand does not move permits. The replicas are members like the pods,
// so the handover moves their slices too: a replica acknowledges a
// smaller slice only once its leases outstanding fit it and it is not
// learning after a restart.
//
// # Guarantees
//
// Checked by randomized tests over pod sets and caller demands (≥ 10,000
// cases from a fixed seed) and by fuzz targets: Exact hands out exactly its
// total; FairShare's guarantees are listed on it; both are deterministic.
// Follow is checked the same way, and in 10,000 seeded worlds (and the
// fuzz target FuzzFollowWorld) of pods whose demand changes, replicas that
// lend, lose returns and restart, documents and acknowledgements late,
// stale or out of order, moved by internal/handover: at every step the
// permits the pods' gates enforce plus the leases outstanding stay within
// the total. A seeded model of steady load with Poisson noise checks that
// the division then moves at most once a minute.
package division
