package backpressure

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// collectors export the Runtime's gates, retry budgets and dispatchers.
type collectors struct {
	gates       *metrics.GateCollector
	budgets     *metrics.RetryCollector
	dispatchers *metrics.DispatcherCollector
	lentOut     *lentOutCollector
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
	c := &collectors{gates: g, budgets: b, dispatchers: d, lentOut: newLentOutCollector(), bootstrap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
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
	if c.lentOut, err = metrics.Register(reg, c.lentOut); err != nil {
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

// lentOutCollector exports the permits each gate lent out to other pods'
// calls (gate.Gate.LendOut, through Options.Offer), beside the
// backpressure_gate_* series of the gates' own collector and labelled
// alike. Like it, it reads the gates' Stats at scrape time and serves any
// number of gates, so that Runtimes sharing a registry share it.
//
// The permits lent out are in backpressure_gate_in_flight too, because
// they are the gate's own permits and a shrink waits for them; they are
// not in backpressure_gate_admitted_total. A reading of this pod's demand
// from its calls in flight leaves them out: in flight less
// backpressure_gate_lent_out_in_flight is the calls of its own, while the
// permits lent out are the borrowing pods' demand, which those pods count
// in their borrowed calls.
type lentOutCollector struct {
	total, inFlight *prometheus.Desc

	mu    sync.RWMutex
	gates map[string]*gate.Gate // by name; guarded by mu
}

func newLentOutCollector() *lentOutCollector {
	gl := []string{"gate"}
	return &lentOutCollector{
		total: prometheus.NewDesc("backpressure_gate_lent_out_total",
			"Permits of the gate's own share lent out to calls of other pods whose shares were full while the reserve was lent out (the permit server asked for them); not counted in backpressure_gate_admitted_total.", gl, nil),
		inFlight: prometheus.NewDesc("backpressure_gate_lent_out_in_flight",
			"Permits of the gate lent out to calls of other pods and not yet released. They are in backpressure_gate_in_flight, which a smaller share waits for, but are not this pod's demand.", gl, nil),
		gates: map[string]*gate.Gate{},
	}
}

// add starts exporting g; names are unique, as in the gates' collector.
func (c *lentOutCollector) add(g *gate.Gate) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.gates[g.Name()]; dup {
		return fmt.Errorf("metrics: a gate named %q is already collected", g.Name())
	}
	c.gates[g.Name()] = g
	return nil
}

// remove stops exporting the gate named name.
func (c *lentOutCollector) remove(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.gates, name)
}

// Describe sends the collector's two descriptors.
func (c *lentOutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.total
	ch <- c.inFlight
}

// Collect reads every gate's Stats, in name order, and sends its series.
func (c *lentOutCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	names := slices.Sorted(maps.Keys(c.gates))
	gates := make([]*gate.Gate, len(names))
	for i, name := range names {
		gates[i] = c.gates[name]
	}
	c.mu.RUnlock()
	for _, g := range gates {
		st := g.Stats()
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(st.LentOut), g.Name())
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.LentOutInFlight), g.Name())
	}
}
