// Package grpcmw puts a gate in front of gRPC: server interceptors gate the
// calls a server receives, client interceptors gate the calls a client makes
// to a downstream.
//
// A Selector picks the gate for each call from its full method name, so one
// interceptor can gate methods differently or leave some ungated, which it
// says explicitly; Fixed gates every call with one gate.
//
// # Rejections
//
// A call the gate rejects ends with codes.ResourceExhausted and these
// details, which clients read with status.FromError and Status.Details:
//
//   - google.rpc.ErrorInfo with Reason the gate's reason in upper snake case
//     (RATE_LIMITED, QUEUE_FULL, WAIT_TIMEOUT, DEADLINE_TOO_SHORT, CLOSED;
//     see ErrorReason), Domain "backpressure.dev", and Metadata "gate" (the
//     gate's name) and "permits" (its in-flight limit at that moment);
//   - google.rpc.RetryInfo when the gate knows when the call could succeed:
//     when it is rate limited, the time until its next token.
//
// A call whose context ends while it waits for a permit ends with
// codes.Canceled or codes.DeadlineExceeded instead.
//
// On the client side a rejected call is never sent, and its error also
// unwraps to the *gate.Rejection, so errors.As and errors.Is with the gate's
// sentinels tell a local rejection from a downstream's RESOURCE_EXHAUSTED.
//
// # Permits
//
// A server call holds its permit until its handler returns, however it
// returns: a response, an error, a panic (which goes on after the release),
// or a client that went away (the handler sees its context end).
//
// A client call holds its permit until it ends. For a unary call that is
// when the downstream answers, even when the caller left before: its
// context's end does not cancel the call, which goes on in the background
// until the answer or the linger (WithLinger), as httpmw.Transport's does,
// because the downstream keeps counting a call whose client left. For a
// stream it is the first of: RecvMsg
// returning an error or io.EOF, RecvMsg returning the response of a stream
// that has only one (client streaming), SendMsg failing, the call's context
// ending, or the stream failing to start. A stream that is dropped without
// any of these holds its permit until its context ends, as it holds its
// resources in grpc-go; always cancel a stream's context or read it to the
// end. A stream's context ending cancels the stream on the server too
// (grpc-go sends RST_STREAM), and no answer follows that a permit could
// wait for: a stream, unlike a unary call, is the caller's to end.
//
// # A missing gate
//
// A nil *gate.Gate is a programming error, never a way to turn gating off:
// Fixed panics when given one, and an interceptor panics when its Selector
// gates a call with one (as httpmw's Middleware and Transport do). A gate
// that does not exist is reported where it is looked up, by the error of
// backpressure.Runtime.Gate, when the service starts: look the gates up once,
// then build the interceptors. A call goes ungated only where a Selector
// says so.
package grpcmw
