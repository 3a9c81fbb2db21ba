package grpcmw

import (
	"context"

	"google.golang.org/grpc"
)

// UnaryServerInterceptor returns an interceptor that admits every unary call
// through the gate sel picks for it before calling the handler, and releases
// the permit when the handler returns or panics. A rejected call ends with
// RESOURCE_EXHAUSTED without reaching the handler; see the package
// documentation for its details.
//
// Put it after interceptors that should see every call (logging, metrics,
// panic recovery) and before those that do the call's work.
func UnaryServerInterceptor(sel Selector) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		g := selectGate(ctx, sel, info.FullMethod)
		if g == nil {
			return handler(ctx, req)
		}
		p, err := g.Acquire(ctx)
		if err != nil {
			return nil, admissionError(g, err)
		}
		defer p.Release()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that admits every stream
// through the gate sel picks for it before calling the handler, and releases
// the permit when the handler returns or panics: the stream holds one permit
// for its whole life. A rejected stream ends with RESOURCE_EXHAUSTED without
// reaching the handler.
func StreamServerInterceptor(sel Selector) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		g := selectGate(ss.Context(), sel, info.FullMethod)
		if g == nil {
			return handler(srv, ss)
		}
		p, err := g.Acquire(ss.Context())
		if err != nil {
			return admissionError(g, err)
		}
		defer p.Release()
		return handler(srv, ss)
	}
}
