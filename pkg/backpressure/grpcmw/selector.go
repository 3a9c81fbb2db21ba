package grpcmw

import (
	"context"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// Selector returns the gate for a call, given its context and full method
// name ("/package.Service/Method"), and gated true; or gated false to let
// the call through ungated, on purpose. An interceptor panics when a
// Selector gates a call with a nil gate (see the package documentation, "A
// missing gate"). A Selector runs on every call, so it must be fast and
// safe for concurrent use.
type Selector func(ctx context.Context, fullMethod string) (g *gate.Gate, gated bool)

// Fixed returns a Selector that gates every call with g. It panics if g is
// nil: a call meant to be gated must not go out ungated by mistake.
func Fixed(g *gate.Gate) Selector {
	if g == nil {
		panic("grpcmw: Fixed with a nil gate")
	}
	return func(context.Context, string) (*gate.Gate, bool) { return g, true }
}

// selectGate returns the gate sel picks for method, nil for an ungated
// call; it panics when sel gates the call with a nil gate.
func selectGate(ctx context.Context, sel Selector, method string) *gate.Gate {
	g, gated := sel(ctx, method)
	if gated && g == nil {
		panic("grpcmw: Selector gated " + method + " with a nil gate")
	}
	if !gated {
		return nil
	}
	return g
}
