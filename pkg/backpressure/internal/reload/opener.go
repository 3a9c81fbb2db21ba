package reload

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Source is an open plan source: *DirSource or *ConfigMapSource, or a
// wrapper of one.
type Source interface {
	// Start delivers the plans read so far, then every change, until ctx
	// ends.
	Start(ctx context.Context) error
	// Plans returns the plan in force for every gate, keyed by gate name.
	Plans() map[string]plan.Document
}

// Releaser is implemented by a Source that can tell the operator that this
// pod has handed back its share of gates, as *DirSource and
// *ConfigMapSource do (see DirSource.Release).
type Releaser interface {
	Release(ctx context.Context, gates []string) error
}

// Opener opens a source with the options its reader (a Runtime) gives it:
// the subscriber, logger, registerer and acknowledgement options.
type Opener func(ctx context.Context, opts Options) (Source, error)

// sourceWrapper holds the function package runtime registers with
// RegisterSourceWrapper.
var sourceWrapper atomic.Value

// RegisterSourceWrapper is called once, by package runtime, with a function
// that returns a backpressure.Source whose Opener is wrap applied to the given
// one's. It lets a program of this module (the example gateway's fault
// injection) decorate a source, which the library's public API, where a
// Source is opaque, does not offer.
func RegisterSourceWrapper[S any](f func(src S, wrap func(Opener) Opener) S) {
	sourceWrapper.Store(f)
}

// WrapSource returns src, a backpressure.Source, with its Opener replaced by
// wrap(opener). It panics when package runtime has not registered its
// wrapper, which cannot happen once src exists, or when S is not
// backpressure.Source.
func WrapSource[S any](src S, wrap func(Opener) Opener) S {
	f, ok := sourceWrapper.Load().(func(S, func(Opener) Opener) S)
	if !ok {
		panic(fmt.Sprintf("reload: WrapSource: no wrapper registered for %T", src))
	}
	return f(src, wrap)
}
