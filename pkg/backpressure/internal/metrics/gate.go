package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// GateSource is what GateCollector reads; *gate.Gate implements it.
type GateSource interface {
	Name() string
	Stats() gate.Stats
}

// GateCollector exports the backpressure_gate_* metrics of any number of
// gates. It is safe for concurrent use.
type GateCollector struct {
	sources sources[GateSource]

	permits, inFlight, queueDepth, queueWait, admitted, rejected, borrows, returnedEarly, borrowedInFlight, lentOut, lentOutInFlight *prometheus.Desc
}

var _ prometheus.Collector = (*GateCollector)(nil)

// NewGateCollector returns a collector for gates, registered with reg unless
// reg is nil.
func NewGateCollector(reg prometheus.Registerer) (*GateCollector, error) {
	gl := []string{"gate"}
	c := &GateCollector{
		sources:    sources[GateSource]{kind: "gate"},
		permits:    prometheus.NewDesc("backpressure_gate_permits", "Permits (in-flight limit) of the gate in force.", gl, nil),
		inFlight:   prometheus.NewDesc("backpressure_gate_in_flight", "Calls admitted by the gate and not yet released.", gl, nil),
		queueDepth: prometheus.NewDesc("backpressure_gate_queue_depth", "Calls waiting in the gate's waiting room.", gl, nil),
		queueWait:  prometheus.NewDesc("backpressure_gate_queue_wait_seconds", "Time calls that waited spent in the gate's waiting room, whether admitted or not.", gl, nil),
		admitted:   prometheus.NewDesc("backpressure_gate_admitted_total", "Calls the gate admitted.", gl, nil),
		rejected:   prometheus.NewDesc("backpressure_gate_rejected_total", "Calls the gate rejected, by reason.", []string{"gate", "reason"}, nil),
		borrows: prometheus.NewDesc("backpressure_gate_borrows_total",
			"Permits the gate asked of the reserve's permit server when its own were taken, by result: borrowed (the call ran on a lent permit, not counted in admitted), not_lent (none to lend), failed (the server could not be asked in time; the call went on with the pod's own share).",
			[]string{"gate", "result"}, nil),
		borrowedInFlight: prometheus.NewDesc("backpressure_gate_borrowed_in_flight",
			"Calls of the gate running on permits borrowed from the reserve, not in backpressure_gate_in_flight (a call whose loan was returned early counts there).", gl, nil),
		returnedEarly: prometheus.NewDesc("backpressure_gate_loans_returned_early_total",
			"Borrowed permits returned to the reserve before their calls ended, the calls going on on permits of the gate's own (returning early: gate.LendRules.ReturnEarly).", gl, nil),
		// The permits lent out are in in_flight too, being the gate's own
		// permits, which a shrink waits for; they are another pod's
		// demand, so a reading of this pod's demand leaves them out.
		lentOut: prometheus.NewDesc("backpressure_gate_lent_out_total",
			"Permits of the gate's own share lent out to calls of other pods whose shares were full while the reserve was lent out (the permit server asked for them); not counted in backpressure_gate_admitted_total.", gl, nil),
		lentOutInFlight: prometheus.NewDesc("backpressure_gate_lent_out_in_flight",
			"Permits of the gate lent out to calls of other pods and not yet released. They are in backpressure_gate_in_flight, which a smaller share waits for, but are not this pod's demand.", gl, nil),
	}
	if err := register(reg, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Add starts exporting g. Names must be unique within a collector.
func (c *GateCollector) Add(g GateSource) error { return c.sources.add(g) }

// Remove stops exporting the gate named name.
func (c *GateCollector) Remove(name string) { c.sources.remove(name) }

// Describe sends the descriptors of every metric the collector exports.
func (c *GateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.permits, c.inFlight, c.queueDepth, c.queueWait, c.admitted, c.rejected, c.borrows, c.returnedEarly, c.borrowedInFlight, c.lentOut, c.lentOutInFlight} {
		ch <- d
	}
}

// Collect reads every gate's Stats and sends its metrics.
func (c *GateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.sources.list() {
		name, st := g.Name(), g.Stats()
		ch <- prometheus.MustNewConstMetric(c.permits, prometheus.GaugeValue, float64(st.Limits.Permits), name)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.InFlight), name)
		ch <- prometheus.MustNewConstMetric(c.queueDepth, prometheus.GaugeValue, float64(st.Queued), name)
		ch <- prometheus.MustNewConstHistogram(c.queueWait, st.QueueWait.Count, st.QueueWait.Sum.Seconds(), st.QueueWait.Buckets(), name)
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(st.Admitted), name)
		for _, r := range gate.Reasons {
			ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(st.Rejected[r]), name, r.String())
		}
		ch <- prometheus.MustNewConstMetric(c.borrows, prometheus.CounterValue, float64(st.Borrowed), name, "borrowed")
		ch <- prometheus.MustNewConstMetric(c.borrows, prometheus.CounterValue, float64(st.NotLent), name, "not_lent")
		ch <- prometheus.MustNewConstMetric(c.borrows, prometheus.CounterValue, float64(st.LendFailed), name, "failed")
		ch <- prometheus.MustNewConstMetric(c.returnedEarly, prometheus.CounterValue, float64(st.ReturnedEarly), name)
		ch <- prometheus.MustNewConstMetric(c.borrowedInFlight, prometheus.GaugeValue, float64(st.BorrowedInFlight), name)
		ch <- prometheus.MustNewConstMetric(c.lentOut, prometheus.CounterValue, float64(st.LentOut), name)
		ch <- prometheus.MustNewConstMetric(c.lentOutInFlight, prometheus.GaugeValue, float64(st.LentOutInFlight), name)
	}
}
