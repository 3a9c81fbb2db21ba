package metrics

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Register registers a QuotaCollector with controller-runtime's metrics
// registry, which the manager's metrics server serves. It reads through the
// manager's cache and exports once the manager is elected leader.
func Register(mgr manager.Manager) error {
	c := NewQuotaCollector(mgr.GetClient(),
		WithElected(mgr.Elected()),
		WithLogger(mgr.GetLogger().WithName("quota-metrics")))
	// The registry is process-wide: a collector left by an earlier manager of
	// this process (a restart in tests) would read a stopped cache.
	ctrlmetrics.Registry.Unregister(c)
	if err := ctrlmetrics.Registry.Register(c); err != nil {
		return fmt.Errorf("metrics: register the quota collector: %w", err)
	}
	return nil
}
