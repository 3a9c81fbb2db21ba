package reload

import (
	"context"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Source is an open plan source: *DirSource or *ConfigMapSource.
type Source interface {
	// Start delivers the plans read so far, then every change, until ctx
	// ends.
	Start(ctx context.Context) error
	// Plans returns the plan in force for every gate, keyed by gate name.
	Plans() map[string]plan.Document
	// Acknowledged reports whether the operator waits for this pod's
	// acknowledgement of the gate's smaller shares in epoch (see
	// DirSource.Acknowledged).
	Acknowledged(gate, epoch string) bool
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
