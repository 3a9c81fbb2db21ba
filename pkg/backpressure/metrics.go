package backpressure

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// collectors export the Runtime's gates, retry budgets and dispatchers.
type collectors struct {
	gates       *metrics.GateCollector
	budgets     *metrics.RetryCollector
	dispatchers *metrics.DispatcherCollector
	bootstrap   *prometheus.GaugeVec // gate
	lapsed      *prometheus.GaugeVec // gate
}

// newCollectors makes the collectors and registers them with reg unless reg
// is nil. A registerer that already holds collectors of the same kind, from
// another Runtime, lends them, so two Runtimes can share a registry as long
// as their gate names differ.
func newCollectors(reg prometheus.Registerer) (*collectors, error) {
	// Made unregistered, then registered here, to tell an existing
	// collector from a real error.
	g, err := metrics.NewGateCollector(nil)
	if err != nil {
		return nil, err
	}
	b, err := metrics.NewRetryCollector(nil)
	if err != nil {
		return nil, err
	}
	d, err := metrics.NewDispatcherCollector(nil)
	if err != nil {
		return nil, err
	}
	c := &collectors{gates: g, budgets: b, dispatchers: d, bootstrap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backpressure_config_gate_bootstrap",
		Help: "1 while the gate enforces the application's bootstrap plan because no published plan was read " +
			"when the pod started (the pod acknowledges nothing meanwhile), 0 once it enforces a published plan.",
	}, []string{"gate"}), lapsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backpressure_plan_source_lapsed",
		Help: "1 while the gate admits nothing because its plan source has not confirmed the plan for nearly " +
			"the operator's unacknowledged delay (the operator may have given the share away), 0 once it enforces " +
			"its share again.",
	}, []string{"gate"})}
	if reg == nil {
		return c, nil
	}
	if c.gates, err = metrics.Register(reg, c.gates); err != nil {
		return nil, err
	}
	if c.budgets, err = metrics.Register(reg, c.budgets); err != nil {
		return nil, err
	}
	if c.dispatchers, err = metrics.Register(reg, c.dispatchers); err != nil {
		return nil, err
	}
	if c.bootstrap, err = metrics.Register(reg, c.bootstrap); err != nil {
		return nil, err
	}
	if c.lapsed, err = metrics.Register(reg, c.lapsed); err != nil {
		return nil, err
	}
	return c, nil
}
