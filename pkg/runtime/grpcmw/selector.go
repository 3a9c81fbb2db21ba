package grpcmw

import (
	"context"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
)

// Selector returns the gate for a call, given its context and full method
// name ("/package.Service/Method"), or nil to let the call through ungated.
// It runs on every call, so it must be fast and safe for concurrent use.
type Selector func(ctx context.Context, fullMethod string) *gate.Gate

// Fixed returns a Selector that gates every call with g. It panics if g is
// nil: a call meant to be gated must not go out ungated by mistake.
func Fixed(g *gate.Gate) Selector {
	if g == nil {
		panic("grpcmw: Fixed with a nil gate")
	}
	return func(context.Context, string) *gate.Gate { return g }
}
