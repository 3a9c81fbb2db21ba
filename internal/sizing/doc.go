// Package sizing is the per-pod arithmetic: from a downstream's contract and
// the number of pods, the permits, rate, burst, waiting room, workers and
// retry budget of one pod's share (Little's law, the deadline budget,
// retries, backlog), checked against latency, deadline, demand and retries.
// How the usable permits are split over callers and named pods is
// internal/division's; how capacity moves between pods, internal/handover's.
//
// It is pure: plain Go values in, plain values out, no Kubernetes types, no
// clock, no logging. The controller and the kubectl-backpressure calculator
// reach it through internal/quota, so both compute the same numbers.
//
// # The per-pod arithmetic
//
// For a contract of C calls in flight of which this cluster uses C' (all of
// it unless Input.ClusterConcurrency says otherwise), safety percentage s
// (as a fraction below) and divisor N (the pods the contract is divided
// over):
//
//	usable A       = floor(C'·s), computed in integers; or a shared
//	                 contract caller's Part.Permits
//	base           = floor(A / N)
//	extra          = A mod N: that many pods hold base+1, the rest base,
//	                 so the pods hold base·N + extra = A, every permit
//	usable rate    = R·C'·s / C, usable burst = floor(B·C'·s / C), usable
//	                 retry budget = the global retry budget (or the Part's)
//
// A pod's share is sized for its own permits p (Result.ShareFor):
//
//	rate           = usable rate · p / A          (0 when there is no rate)
//	burst          = max(1, floor(usable burst · p / A)) for p ≥ 1
//	retry budget   = usable retry budget · p / A
//	capacity μ     = p / W                        (calls per second at typical latency W)
//	queue wait Qw  = maxQueueWait if given, else (D − W) / 2;
//	                 never more than D − W, and 0 when D ≤ W
//	queueCapacity  = floor(μ·Qw) = floor(p·Qw / W)
//	acquireTimeout = min(acquireTimeout, Qw)      (Qw when not given)
//	workers        = min(p, ceil(λ/N · W)) when demand λ is known, else p
//
// A pod holding no permits gets no rate, burst, retry budget, queue or
// workers: it sheds every call. Result.PerPod is the share at base,
// PerPodExtra the share at base+1.
//
// A pod of a quota with a reserve of R permits, lent per call by a permit
// server, has its waiting room sized for the permits that can serve its
// waiters (Result.ShareWithReserve): a waiter runs on whichever comes
// first, a permit of its pod or one of the reserve, so
//
//	queueCapacity  = floor((p + R)·Qw / W)        for p ≥ 1 (0 for p = 0)
//
// Waiting calls hold nothing downstream, so the contract is unchanged, and
// none waits longer than Qw.
//
// When A < N (fewer permits than pods), the BelowOne policy decides:
// Strict gives A pods one permit each and the other N − A none, and reports
// [ReasonQuotaTooSmall]; AtLeastOne gives every pod 1 permit and reports
// [ReasonOvercommitted] with the real total N and how far it exceeds the
// contract. Neither happens silently.
//
// # Guarantees
//
// These hold for every input and are checked by table tests, by invariant
// checks over random inputs from a fixed seed (20,000 sizings, with cluster
// shares and callers' parts), and by the fuzz targets FuzzSize and
// FuzzAmplification:
//
//   - base·N + extra = A ≤ C'·s ≤ C, and the pods hold exactly A
//     (TotalPermits). The single exception is AtLeastOne with A < N: the
//     pods hold N, and the result always carries a [ReasonOvercommitted]
//     diagnostic whose message states N.
//   - Permits are computed in integer arithmetic: floating-point rounding
//     never hands out a permit too many.
//   - Summed over the pods, the shares' rates and retry budgets are the
//     usable totals (up to one rounding to float64 per pod), and their
//     bursts at most the usable burst, unless a [ReasonBurstRaisedToOne]
//     diagnostic says by how much the raise to one exceeds it.
//   - Every share: workers ≤ permits; queue capacity follows its own
//     permits (its own and the reserve's, ShareWithReserve), up to
//     plan.MaxQueueCapacity; AcquireTimeout ≤ MaxQueueWait; MaxQueueWait + W ≤ D
//     whenever D > W, and MaxQueueWait = QueueCapacity = 0 when D ≤ W.
//   - No function panics. Every float in a result is finite and not
//     negative, except [BacklogResult.GrowthPerSecond], which is signed by
//     definition (negative means the backlog drains). Every duration is not
//     negative, and every count lies in [0, MaxCount]; a count or duration
//     whose exact value would not fit saturates at MaxCount or at the
//     largest time.Duration.
//   - Invalid input returns an *[InputError] naming the input and no result.
//   - Results are deterministic: the same input gives the same result.
//
// Which pods hold base+1, and when a pod may start using a larger share,
// is not this package's concern: internal/division assigns the shares to
// named pods, and internal/handover hands capacity over only once the pods
// giving it up have let go of it.
//
// # Diagnostics
//
// Every finding is a [Diagnostic] with a CamelCase reason and a message that
// carries the arithmetic behind it. The reasons QuotaTooSmall, Overcommitted,
// DeadlineBelowLatency and DemandExceedsQuota are spelled exactly as the
// DownstreamQuota API's condition reasons; the others are findings of the
// math that the API does not name as condition reasons.
package sizing
