package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
)

// DispatcherSource is what DispatcherCollector reads; *dispatch.Dispatcher
// implements it.
type DispatcherSource interface {
	Name() string
	Stats() dispatch.Stats
}

// DispatcherCollector exports the backpressure_dispatcher_* metrics of any
// number of dispatchers. It is safe for concurrent use.
type DispatcherCollector struct {
	sources sources[DispatcherSource]

	workers, active, queueDepth, queueWait, rejected *prometheus.Desc
}

var _ prometheus.Collector = (*DispatcherCollector)(nil)

// NewDispatcherCollector returns a collector for dispatchers, registered
// with reg unless reg is nil.
func NewDispatcherCollector(reg prometheus.Registerer) (*DispatcherCollector, error) {
	dl := []string{"dispatcher"}
	c := &DispatcherCollector{
		sources:    sources[DispatcherSource]{kind: "dispatcher"},
		workers:    prometheus.NewDesc("backpressure_dispatcher_workers", "Workers the dispatcher is configured with.", dl, nil),
		active:     prometheus.NewDesc("backpressure_dispatcher_active_workers", "Workers of the dispatcher that are not idle.", dl, nil),
		queueDepth: prometheus.NewDesc("backpressure_dispatcher_queue_depth", "Tasks waiting for a worker.", dl, nil),
		queueWait:  prometheus.NewDesc("backpressure_dispatcher_queue_wait_seconds", "Time queued tasks waited for a worker.", dl, nil),
		rejected:   prometheus.NewDesc("backpressure_dispatcher_rejected_total", "Tasks the dispatcher refused or dropped, by reason.", []string{"dispatcher", "reason"}, nil),
	}
	if err := register(reg, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Add starts exporting d. Names must be unique within a collector.
func (c *DispatcherCollector) Add(d DispatcherSource) error { return c.sources.add(d) }

// Remove stops exporting the dispatcher named name.
func (c *DispatcherCollector) Remove(name string) { c.sources.remove(name) }

// Describe sends the descriptors of every metric the collector exports.
func (c *DispatcherCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.workers, c.active, c.queueDepth, c.queueWait, c.rejected} {
		ch <- d
	}
}

// Collect reads every dispatcher's Stats and sends its metrics.
func (c *DispatcherCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.sources.list() {
		name, st := d.Name(), d.Stats()
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(st.Limits.Workers), name)
		ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(st.Active), name)
		ch <- prometheus.MustNewConstMetric(c.queueDepth, prometheus.GaugeValue, float64(st.Queued), name)
		ch <- prometheus.MustNewConstHistogram(c.queueWait, st.QueueWait.Count, st.QueueWait.Sum.Seconds(), st.QueueWait.Buckets(), name)
		for _, r := range dispatch.Reasons {
			ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(st.Rejected[r]), name, r.String())
		}
	}
}
