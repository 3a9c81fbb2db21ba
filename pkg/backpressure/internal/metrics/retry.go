package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// BudgetSource is what RetryCollector reads; *retry.Budget implements it.
type BudgetSource interface {
	Name() string
	Stats() retry.BudgetStats
}

// RetryCollector exports the backpressure_retry_* metrics of any number of
// retry budgets, labelled with the name of the gate each belongs to. It is
// safe for concurrent use.
type RetryCollector struct {
	sources sources[BudgetSource]

	attempts, exhausted *prometheus.Desc
}

var _ prometheus.Collector = (*RetryCollector)(nil)

// NewRetryCollector returns a collector for retry budgets, registered with
// reg unless reg is nil.
func NewRetryCollector(reg prometheus.Registerer) (*RetryCollector, error) {
	gl := []string{"gate"}
	c := &RetryCollector{
		sources:   sources[BudgetSource]{kind: "retry budget"},
		attempts:  prometheus.NewDesc("backpressure_retry_attempts_total", "Retries made with the gate's retry budget.", gl, nil),
		exhausted: prometheus.NewDesc("backpressure_retry_budget_exhausted_total", "Retries refused because the gate's retry budget had no token.", gl, nil),
	}
	if err := register(reg, c); err != nil {
		return nil, err
	}
	return c, nil
}

// Add starts exporting b. Names must be unique within a collector.
func (c *RetryCollector) Add(b BudgetSource) error { return c.sources.add(b) }

// Remove stops exporting the budget named name.
func (c *RetryCollector) Remove(name string) { c.sources.remove(name) }

// Describe sends the descriptors of every metric the collector exports.
func (c *RetryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.attempts
	ch <- c.exhausted
}

// Collect reads every budget's Stats and sends its metrics.
func (c *RetryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.sources.list() {
		name, st := b.Name(), b.Stats()
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(st.Retries), name)
		ch <- prometheus.MustNewConstMetric(c.exhausted, prometheus.CounterValue, float64(st.Exhausted), name)
	}
}
