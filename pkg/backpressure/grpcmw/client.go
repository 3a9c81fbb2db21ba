package grpcmw

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// UnaryClientInterceptor returns an interceptor that admits every unary call
// through the gate sel picks for it before sending it, and releases the
// permit when the call returns. A rejected call is not sent; its error is a
// RESOURCE_EXHAUSTED status that unwraps to the *gate.Rejection.
//
// The interceptor never retries. Put it outside (before) any retrying
// interceptor, so that the permit covers every attempt of the call, or
// inside it, so that each attempt takes one; grpc-go's own retries, set in
// the service config, always run inside it.
func UnaryClientInterceptor(sel Selector) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		g := selectGate(ctx, sel, method)
		if g == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		p, err := g.Acquire(ctx)
		if err != nil {
			return admissionError(g, err)
		}
		defer p.Release()
		return invoker(ctx, method, req, reply, cc, opts...)
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
