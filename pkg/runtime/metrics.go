package runtime

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/metrics"
)

// collectors export the Runtime's gates, retry budgets and dispatchers.
type collectors struct {
	gates       *metrics.GateCollector
	budgets     *metrics.RetryCollector
	dispatchers *metrics.DispatcherCollector
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
	c := &collectors{gates: g, budgets: b, dispatchers: d}
	if reg == nil {
		return c, nil
	}
	if c.gates, err = register(reg, c.gates); err != nil {
		return nil, err
	}
	if c.budgets, err = register(reg, c.budgets); err != nil {
		return nil, err
	}
	if c.dispatchers, err = register(reg, c.dispatchers); err != nil {
		return nil, err
	}
	return c, nil
}

// register registers c with reg, or returns the collector of the same kind
// that reg already holds.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
