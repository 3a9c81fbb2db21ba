// Package metrics exports the library's gates, dispatchers and retry
// budgets to Prometheus.
//
// Each collector reads its sources' Stats at scrape time, so admitting a
// call or running a task costs nothing extra for metrics: the hot paths
// update only their own atomic counters, and packages gate, dispatch and
// retry do not import Prometheus. One collector serves any number of
// sources, told apart by the gate or dispatcher label.
//
// Collectors are registered with the prometheus.Registerer passed to their
// constructor; nil means "don't register" (the caller may register the
// collector itself). Nothing here uses the global registry.
//
// The metrics:
//
//	backpressure_gate_permits{gate}                     gauge: permits (in-flight limit) in force
//	backpressure_gate_in_flight{gate}                   gauge: admitted calls not yet released
//	backpressure_gate_queue_depth{gate}                 gauge: calls in the waiting room
//	backpressure_gate_queue_wait_seconds{gate}          histogram: time in the waiting room, of calls that waited
//	backpressure_gate_admitted_total{gate}              counter
//	backpressure_gate_rejected_total{gate,reason}       counter; reason: closed, deadline_too_short, rate_limited, queue_full, wait_timeout
//	backpressure_gate_borrows_total{gate,result}        counter; result: borrowed, not_lent, failed (permits asked of a reserve)
//	backpressure_gate_loans_returned_early_total{gate}  counter: loans returned before their calls ended (gate.LendRules.ReturnEarly)
//	backpressure_gate_borrowed_in_flight{gate}          gauge: calls running on borrowed permits, not in in_flight
//	backpressure_gate_lent_out_total{gate}              counter: own permits lent out to other pods' calls (Options.Offer)
//	backpressure_gate_lent_out_in_flight{gate}          gauge: own permits lent out and not yet released, in in_flight
//	backpressure_dispatcher_workers{dispatcher}         gauge: workers configured
//	backpressure_dispatcher_active_workers{dispatcher}  gauge: workers not idle
//	backpressure_dispatcher_queue_depth{dispatcher}     gauge: tasks waiting for a worker
//	backpressure_dispatcher_queue_wait_seconds{dispatcher} histogram: time queued tasks waited
//	backpressure_dispatcher_rejected_total{dispatcher,reason} counter; reason: queue_full, closed, context_done, shutdown
//	backpressure_retry_attempts_total{gate}             counter: retries made
//	backpressure_retry_budget_exhausted_total{gate}     counter: retries refused for want of a token
package metrics

import "github.com/prometheus/client_golang/prometheus"

// register registers c with reg unless reg is nil. Unlike Register, it
// refuses a second collector of the same kind: one serves every source.
func register(reg prometheus.Registerer, c prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	return reg.Register(c)
}
