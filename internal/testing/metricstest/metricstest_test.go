package metricstest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/backpressure-dev/backpressure-operator/internal/testing/metricstest"
)

func TestSum(t *testing.T) {
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "metricstest_depth"}, []string{"name"})
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metricstest_total"}, []string{"controller", "result"})
	seconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "metricstest_seconds"}, []string{"controller"})
	metrics.Registry.MustRegister(depth, total, seconds)
	t.Cleanup(func() {
		metrics.Registry.Unregister(depth)
		metrics.Registry.Unregister(total)
		metrics.Registry.Unregister(seconds)
	})
	depth.WithLabelValues("quota").Set(0)
	depth.WithLabelValues("contract").Set(7)
	total.WithLabelValues("quota", "success").Add(3)
	total.WithLabelValues("quota", "error").Add(2)
	total.WithLabelValues("contract", "success").Add(100)
	seconds.WithLabelValues("quota").Observe(0.25)
	seconds.WithLabelValues("quota").Observe(0.5)

	for _, c := range []struct {
		family, label, value string
		sum                  float64
		found                bool
	}{
		{"metricstest_depth", "name", "quota", 0, true},
		{"metricstest_depth", "name", "contract", 7, true},
		{"metricstest_depth", "name", "other", 0, false},
		{"metricstest_depth", "controller", "quota", 0, false},
		{"metricstest_total", "controller", "quota", 5, true},
		{"metricstest_seconds", "controller", "quota", 0.75, true},
		{"metricstest_absent", "controller", "quota", 0, false},
	} {
		sum, found, err := metricstest.Sum(c.family, c.label, c.value)
		if err != nil || sum != c.sum || found != c.found {
			t.Errorf("Sum(%s, %s=%s) = %v, %v, %v; want %v, %v", c.family, c.label, c.value, sum, found, err, c.sum, c.found)
		}
	}
}
