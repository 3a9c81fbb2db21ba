package metrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// One collector exports every gate of the process to the registry the
// application passes in; nothing is registered globally.
func ExampleNewGateCollector() {
	reg := prometheus.NewRegistry()
	gates, err := metrics.NewGateCollector(reg)
	if err != nil {
		panic(err)
	}
	g, err := gate.New("logistics", gate.Limits{Permits: 5})
	if err != nil {
		panic(err)
	}
	if err := gates.Add(g); err != nil {
		panic(err)
	}

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		fmt.Println(f.GetName(), len(f.GetMetric()))
	}
	// Output:
	// backpressure_gate_admitted_total 1
	// backpressure_gate_borrowed_in_flight 1
	// backpressure_gate_borrows_total 3
	// backpressure_gate_in_flight 1
	// backpressure_gate_lent_out_in_flight 1
	// backpressure_gate_lent_out_total 1
	// backpressure_gate_loans_returned_early_total 1
	// backpressure_gate_permits 1
	// backpressure_gate_queue_depth 1
	// backpressure_gate_queue_wait_seconds 1
	// backpressure_gate_rejected_total 5
}
