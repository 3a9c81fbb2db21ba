// Package httpmw puts a gate in front of net/http: Middleware gates the
// requests a server receives, Transport gates the calls a client makes to a
// downstream.
//
// # Inbound
//
// Middleware admits each request through the gate before the handler runs
// and holds the permit until the handler returns. A rejected request is
// answered at once, without calling the handler:
//
//   - 429 Too Many Requests when the gate is rate limited;
//   - 503 Service Unavailable when the waiting room is full, the wait timed
//     out, the request's deadline is too short, the gate is closed, or the
//     request's context ended while it waited.
//
// Both carry a Retry-After header in whole seconds, at least 1: the gate's
// hint where it has one (the next token, when rate limited), else the
// default (one second unless WithDefaultRetryAfter says otherwise). The body
// is one line of plain text naming the reason: the gate's (e.g.
// "rate_limited", "queue_full"), or "wait_cancelled" or
// "wait_deadline_exceeded" when the request's context ended while it waited.
//
// # Outbound
//
// Transport is an http.RoundTripper that admits each call through the gate
// before handing it to the base transport. A call is in flight until its
// response body is read to the end or closed, or the call fails, or the
// request's context ends after the response arrived, so that is when the
// permit is released, exactly once. A call whose context ends before the
// response arrives returns the context's error at once but keeps its permit
// until the downstream answers, for at most Transport.Linger: the
// downstream still counts it in flight. A call the gate rejects is never
// sent: RoundTrip returns the *gate.Rejection (wrapped in *url.Error by
// http.Client; errors.As finds it). Transport never retries.
//
// Transport counts the downstream's 429 responses, which are the signal that
// the share is too large for the downstream (see Transport.Throttled,
// Transport.OnThrottled and Metrics).
//
// # A missing gate
//
// A nil *gate.Gate is a programming error, never a way to turn gating off:
// Middleware panics when given one, and Transport panics on its first call
// without one (as grpcmw's constructors and interceptors do). A gate that
// does not exist is reported where it is looked up, by the error of
// backpressure.Runtime.Gate, when the service starts: look the gates up once,
// then build the middleware.
package httpmw
