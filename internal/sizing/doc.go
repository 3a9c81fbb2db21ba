// Package sizing divides a downstream's global contract into per-pod shares
// and checks the result against latency, deadline, demand and retries.
//
// It is pure: plain Go values in, plain values out, no Kubernetes types, no
// clock, no logging. The controller and the kubectl-backpressure calculator
// reach it through internal/quotaplan, so both compute the same numbers.
//
// # The per-pod plan
//
// For a contract of C calls in flight, safety percentage s (as a fraction
// below) and divisor N (the replica count the contract is divided by):
//
//	permits        = floor(C·s / N), computed in integers
//	rate           = R·s / N                    (0 when the contract has no rate)
//	burst          = max(1, floor(B·s / N))     (0 when the contract has no rate)
//	capacity μ     = permits / W                (calls per second at typical latency W)
//	queue wait Qw  = maxQueueWait if given, else (D − W) / 2;
//	                 never more than D − W, and 0 when D ≤ W
//	queueCapacity  = floor(μ·Qw) = floor(permits·Qw / W)
//	acquireTimeout = min(acquireTimeout, Qw)    (Qw when not given)
//	workers        = min(permits, ceil(λ/N · W)) when demand λ is known, else permits
//	retry budget   = global retry budget / N
//
// When C·s/N is below one, the BelowOne policy decides: Strict leaves every
// pod at 0 permits and reports [ReasonQuotaTooSmall]; AtLeastOne gives every
// pod 1 permit and reports [ReasonOvercommitted] with the real global total
// N and how far it exceeds the contract. Neither happens silently.
//
// # Guarantees
//
// These hold for every input and are checked by table tests, by invariant
// checks over random inputs from a fixed seed, and by the fuzz targets
// FuzzPlan and FuzzAmplification:
//
//   - Permits·N ≤ C·s ≤ C. The single exception is AtLeastOne raising a
//     share below one to 1, and then the plan always carries a
//     [ReasonOvercommitted] diagnostic whose message states the total N.
//   - Permits are computed in integer arithmetic: floating-point rounding
//     never hands out a permit too many.
//   - Workers ≤ Permits; AcquireTimeout ≤ MaxQueueWait; MaxQueueWait + W ≤ D
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
// # Diagnostics
//
// Every finding is a [Diagnostic] with a CamelCase reason and a message that
// carries the arithmetic behind it. The reasons QuotaTooSmall, Overcommitted,
// DeadlineBelowLatency and DemandExceedsQuota are spelled exactly as the
// DownstreamQuota API's condition reasons; the others are findings of the
// math that the API does not name as condition reasons.
package sizing
