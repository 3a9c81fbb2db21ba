package sizing

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Reasons of diagnostics. The first four are spelled exactly as the
// DownstreamQuota API's condition reasons (a test in internal/quota
// holds them equal); the rest are findings the API has no condition reason
// for. All are CamelCase and stable: alerts and scripts match them.
const (
	// ReasonQuotaTooSmall means there are fewer usable permits A than pods
	// and the Strict policy gave A pods one permit and left the rest at 0.
	ReasonQuotaTooSmall = "QuotaTooSmall"
	// ReasonOvercommitted means the AtLeastOne policy raised every pod to 1
	// permit; the message states the real global total.
	ReasonOvercommitted = "Overcommitted"
	// ReasonDeadlineBelowLatency means the deadline is not above the typical
	// latency: no time is left to queue, and when it is below, a typical
	// call misses it.
	ReasonDeadlineBelowLatency = "DeadlineBelowLatency"
	// ReasonDemandExceedsQuota means demand × typical latency needs more calls in
	// flight than the pods hold, so part of the demand will be shed.
	ReasonDemandExceedsQuota = "DemandExceedsQuota"

	// ReasonDemandExceedsQuotaAtWorstLatency means demand fits at the typical
	// latency but not at the worst, when part of it will be shed.
	ReasonDemandExceedsQuotaAtWorstLatency = "DemandExceedsQuotaAtWorstLatency"
	// ReasonWorstLatencyExceedsDeadline means a call that waits the whole queue
	// wait budget and then takes the worst latency misses the deadline.
	ReasonWorstLatencyExceedsDeadline = "WorstLatencyExceedsDeadline"
	// ReasonQueueWaitClamped means the given max queue wait plus the typical
	// latency exceeds the deadline, so the wait budget was lowered to what
	// the deadline leaves.
	ReasonQueueWaitClamped = "QueueWaitClamped"
	// ReasonRateAllowsExcessInFlight means the contract's rate × latency exceeds
	// its concurrency, so the rate limit alone would not bound in-flight
	// calls; the permits do.
	ReasonRateAllowsExcessInFlight = "RateAllowsExcessInFlight"
	// ReasonBurstRaisedToOne means the burst share is below one per pod and was
	// raised to 1, since a token bucket of size 0 admits nothing.
	ReasonBurstRaisedToOne = "BurstRaisedToOne"
	// ReasonRetriesWithoutBudget means retries are allowed but the retry budget
	// is 0, so no call will be retried.
	ReasonRetriesWithoutBudget = "RetriesWithoutBudget"
)

// Diagnostic is one finding of a sizing, with the numbers behind it.
type Diagnostic struct {
	// Reason is one of the Reason constants.
	Reason string
	// Message states the finding and its arithmetic, for people.
	Message string
}

// Num formats a figure as every message and table of a sizing does: at most
// two decimals, no trailing zeros. Rate and Percent are its forms for calls
// per second and fractions; kubectl-backpressure formats with them too.
func Num(f float64) string { return num(f) }

// Rate formats calls per second: "181.82/s".
func Rate(f float64) string { return rate(f) }

// Percent formats a fraction as a percentage with one decimal: "90.4%".
func Percent(f float64) string { return percent(f) }

// num formats a figure for a message: at most two decimals, no trailing
// zeros.
func num(f float64) string {
	s := strconv.FormatFloat(math.Round(f*100)/100, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// sum formats a + b for non-negative durations, in seconds when the sum
// would overflow a time.Duration.
func sum(a, b time.Duration) string {
	if a > math.MaxInt64-b {
		return num(a.Seconds()+b.Seconds()) + "s"
	}
	return (a + b).String()
}

// rate formats calls per second.
func rate(f float64) string { return num(f) + "/s" }

// percent formats a fraction as a percentage with one decimal.
func percent(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/10, 'f', 1, 64) + "%"
}
