package runtime

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/internal/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/reload"
)

// Source opens a plan source that delivers its updates to opts.Subscriber.
// New calls it once, with the subscriber, logger, registerer and
// acknowledgement options the Runtime needs. FromDir and FromConfigMap
// return the two sources package reload offers; a function that calls
// reload.NewDirSource with other DirOptions (another poll interval, say) is
// a Source too, as long as it passes opts on (Options.Bootstrap relies on
// their WaitForPlan).
type Source func(ctx context.Context, opts reload.Options) (PlanSource, error)

// PlanSource is an open plan source, such as *reload.DirSource or
// *reload.ConfigMapSource.
type PlanSource interface {
	// Start delivers the plans read so far, then every change, until ctx
	// ends.
	Start(ctx context.Context) error
	// Plans returns the plan in force for every gate, keyed by gate name.
	Plans() map[string]plan.Document
}

// FromDir reads the plans from a directory, normally the workload's
// ConfigMap mounted as a volume (see reload.DirSource). Acknowledgement with
// this source needs Options.Ack.Client.
func FromDir(dir string) Source {
	return func(_ context.Context, opts reload.Options) (PlanSource, error) {
		return reload.NewDirSource(dir, reload.DirOptions{Options: opts})
	}
}

// FromConfigMap reads the plans from the ConfigMap namespace/name through the
// API server (see reload.ConfigMapSource). A Role granting get, list and
// watch on that one ConfigMap is enough; acknowledgement also needs patch on
// pods, and uses client unless Options.Ack.Client is set.
func FromConfigMap(client kubernetes.Interface, namespace, name string) Source {
	return func(ctx context.Context, opts reload.Options) (PlanSource, error) {
		return reload.NewConfigMapSource(ctx, client, namespace, name, opts)
	}
}
