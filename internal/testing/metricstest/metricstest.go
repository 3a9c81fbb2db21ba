// Package metricstest reads what controller-runtime's global metrics
// registry says of one controller, for the operator's envtest suites and
// the performance suite: how many reconciles it ran and how long they
// took, and whether it has work running or queued.
package metricstest

import (
	"fmt"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Sum sums the samples of the metric family of controller-runtime's
// registry whose label is value (a controller's name: its label is
// controller, or name for its work queue). A histogram's sample is the sum
// of its observations. found is false when no sample has that label,
// which for a gauge is not the same as 0: the controller did not register
// it.
func Sum(family, label, value string) (sum float64, found bool, err error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false, fmt.Errorf("metricstest: gather: %w", err)
	}
	i := slices.IndexFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == family })
	if i < 0 {
		return 0, false, nil
	}
	for _, m := range families[i].GetMetric() {
		if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
			continue
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return sum, found, nil
}
