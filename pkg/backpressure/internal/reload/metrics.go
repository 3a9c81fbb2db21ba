package reload

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
)

// Reload results, the values of the result label of
// backpressure_config_reloads_total.
const (
	// ResultSuccess counts a new valid plan for a gate.
	ResultSuccess = "success"
	// ResultError counts a document or source the reader rejected; each
	// distinct bad content counts once, however often it is read again.
	ResultError = "error"
)

// reloadMetrics holds the config reload metrics. Several sources given the same
// registerer share one set, so a process may read two ConfigMaps.
type reloadMetrics struct {
	reloads  *prometheus.CounterVec // result
	planInfo *prometheus.GaugeVec   // gate, hash
	orphaned *prometheus.GaugeVec   // gate
	rejected *prometheus.GaugeVec   // gate
	acks     *prometheus.CounterVec // result
}

func newMetrics(reg prometheus.Registerer) (*reloadMetrics, error) {
	m := &reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backpressure_config_reloads_total",
			Help: "Plan documents read from the config source, by result: success is a new valid plan for a gate, " +
				"error a rejected document (the gate keeps its last good plan) or an unreadable source.",
		}, []string{"result"}),
		planInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backpressure_config_plan_info",
			Help: "The plan in force for each gate: 1 for the gate's current plan hash.",
		}, []string{"gate", "hash"}),
		orphaned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backpressure_config_gate_orphaned",
			Help: "1 when the gate's document has disappeared from the config source and the gate keeps " +
				"its last plan until the process restarts, else 0.",
		}, []string{"gate"}),
		rejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "backpressure_config_gate_rejected",
			Help: "1 while the gate's latest document in the config source is rejected and the gate keeps " +
				"its last good plan (or, without one, has none), 0 once a valid document replaces it.",
		}, []string{"gate"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "backpressure_config_acknowledgements_total",
			Help: "Patches of the pod's applied.backpressure.dev annotations, by result.",
		}, []string{"result"}),
	}
	// Both results exist from the start, so rate() and alerts see a zero
	// rather than an absent series.
	m.reloads.WithLabelValues(ResultSuccess)
	m.reloads.WithLabelValues(ResultError)
	if reg == nil {
		return m, nil
	}
	var err error
	if m.reloads, err = metrics.Register(reg, m.reloads); err != nil {
		return nil, err
	}
	if m.planInfo, err = metrics.Register(reg, m.planInfo); err != nil {
		return nil, err
	}
	if m.orphaned, err = metrics.Register(reg, m.orphaned); err != nil {
		return nil, err
	}
	if m.rejected, err = metrics.Register(reg, m.rejected); err != nil {
		return nil, err
	}
	if m.acks, err = metrics.Register(reg, m.acks); err != nil {
		return nil, err
	}
	return m, nil
}
