// Package division splits a contract's usable permits over those who use
// them: over callers by weight and demand (FairShare, FairShareFloat), and
// over a caller's pods exactly, every permit handed out (Exact, Targets);
// Even states the arithmetic of an exact division in the words every
// message, table and event quotes.
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
// # Guarantees
//
// Checked by randomized tests over pod sets and caller demands (≥ 10,000
// cases from a fixed seed) and by fuzz targets: Exact hands out exactly its
// total; FairShare's guarantees are listed on it; both are deterministic.
package division
