package grpcmw

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/detach"
)

// ClientOption configures a client interceptor.
type ClientOption func(*clientOptions)

type clientOptions struct {
	linger func() time.Duration
}

// WithLinger sets how long a unary call whose caller left before the
// answer may still wait for it, holding its permit: typically the deadline
// of the share in force (backpressure.Share.Deadline), asked when the
// caller leaves. Nil, or a result <= 0, means 10 seconds. It is
// httpmw.Transport's Linger.
func WithLinger(linger func() time.Duration) ClientOption {
	return func(o *clientOptions) { o.linger = linger }
}

// UnaryClientInterceptor returns an interceptor that admits every unary call
// through the gate sel picks for it before sending it, and releases the
// permit when the downstream has answered. A rejected call is not sent;
// its error is a RESOURCE_EXHAUSTED status that unwraps to the
// *gate.Rejection.
//
// A caller whose context ends before the answer gets a Canceled or
// DeadlineExceeded status at once, but the call is not cancelled: the
// downstream keeps working on it, and counts it in flight, until it
// answers, and a permit released when the caller leaves would let a new
// call in while the downstream still holds the abandoned one. So the call
// goes on in the background, as httpmw.Transport's does, and keeps its
// permit until the downstream answers or the linger passes (WithLinger),
// when it is cancelled. This needs a reply that is a protobuf message (the
// answer is read into a message of its own and copied into reply only for
// a caller still waiting); a call with any other reply runs on the
// caller's context and releases its permit when the invoker returns.
//
// The interceptor never retries. Put it outside (before) any retrying
// interceptor, so that the permit covers every attempt of the call, or
// inside it, so that each attempt takes one; grpc-go's own retries, set in
// the service config, always run inside it.
func UnaryClientInterceptor(sel Selector, opts ...ClientOption) grpc.UnaryClientInterceptor {
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		g := selectGate(ctx, sel, method)
		if g == nil {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		p, err := g.Acquire(ctx)
		if err != nil {
			return admissionError(g, err)
		}
		msg, isProto := reply.(proto.Message)
		if ctx.Done() == nil || !isProto {
			defer p.Release()
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		detached, cancel := detach.Context(ctx, o.linger)
		answer := msg.ProtoReflect().New().Interface()
		done := make(chan error, 1)
		go func() {
			err := invoker(detached, method, req, answer, cc, callOpts...)
			p.Release()
			cancel()
			done <- err
		}()
		answered := func(err error) error {
			if err == nil {
				proto.Reset(msg)
				proto.Merge(msg, answer)
			}
			return err
		}
		select {
		case err := <-done:
			return answered(err)
		case <-ctx.Done():
			select {
			case err := <-done: // the answer came as the caller left
				return answered(err)
			default:
				return status.FromContextError(ctx.Err()).Err()
			}
		}
	}
}

// StreamClientInterceptor returns an interceptor that admits every stream
// through the gate sel picks for it before starting it, and holds the permit
// until the stream ends (see the package documentation for when that is).
// A rejected stream is not started; its error is a RESOURCE_EXHAUSTED status
// that unwraps to the *gate.Rejection.
func StreamClientInterceptor(sel Selector) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		g := selectGate(ctx, sel, method)
		if g == nil {
			return streamer(ctx, desc, cc, method, opts...)
		}
		// The permit lives in the wrapper from the start: moving a Permit
		// out of a local variable would copy it.
		s := &clientStream{serverStreams: desc.ServerStreams}
		var err error
		if s.permit, err = g.Acquire(ctx); err != nil {
			return nil, admissionError(g, err)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			s.permit.Release()
			return nil, err
		}
		s.ClientStream = cs
		s.stop = context.AfterFunc(ctx, s.release)
		return s, nil
	}
}

// clientStream holds a stream's permit until the stream ends. RecvMsg,
// SendMsg and the context's callback may observe the end concurrently; done
// lets exactly one of them release the permit.
type clientStream struct {
	grpc.ClientStream
	serverStreams bool
	permit        gate.Permit
	stop          func() bool
	done          atomic.Bool
}

// RecvMsg receives a message and ends the stream on an error, io.EOF or
// the only response.
func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	// With a single response (unary and client-streaming calls) grpc-go
	// has read the status along with it, so a nil error ends the stream too.
	if err != nil || !s.serverStreams {
		s.end()
	}
	return err
}

// SendMsg sends a message and ends the stream if that fails.
func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil {
		// SendMsg fails only once the stream is over: aborted by the client
		// (a status error) or ended by the server (io.EOF, the status to be
		// read by RecvMsg, which no longer reaches the downstream).
		s.end()
	}
	return err
}

// end releases the permit from a caller's goroutine and unregisters the
// context's callback, which would otherwise stay with a long-lived context.
func (s *clientStream) end() {
	s.release()
	s.stop()
}

func (s *clientStream) release() {
	if s.done.CompareAndSwap(false, true) {
		s.permit.Release()
	}
}
