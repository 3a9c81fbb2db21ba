// Package retry retries failed calls to a downstream without amplifying an
// overload.
//
// Retries create no capacity: when a downstream is saturated, every retry is
// one more call it must refuse, and a "retry once" rule can turn a 31 %
// rejection rate into 41 %. So Do retries only when all of these hold:
//
//   - The error is not a local rejection. A call that this process's own gate
//     or dispatcher refused (an error with a LocalRejection method reporting
//     true, such as *gate.Rejection) was shed on purpose and is never retried.
//   - The caller's Classifier says the error is retryable. Nothing is
//     retryable by default. In particular an HTTP 429 or a gRPC
//     RESOURCE_EXHAUSTED from the downstream means "over capacity" and should
//     stay non-retryable unless the downstream's own Retry-After says
//     otherwise; this package imports neither net/http nor gRPC, so the
//     classifier is where such status codes are told apart.
//   - Fewer than Policy.MaxRetries retries have been made.
//   - The backoff (exponential, with full jitter) ends before the context's
//     deadline.
//   - The Budget, a token bucket at the pod's share of the global retry
//     budget, has a token. The budget is shared by every call to the same
//     downstream, so retries stay a bounded fraction of traffic whatever the
//     error rate.
package retry
