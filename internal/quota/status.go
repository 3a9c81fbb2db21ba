package quota

import (
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// perPodStatus converts a per-pod share to status.perPod. Rates are rounded
// to thousandths (1.25/s is "1250m").
func perPodStatus(p sizing.PerPod) v1alpha1.PerPodPlan {
	return v1alpha1.PerPodPlan{
		Permits:              int32(p.Permits),
		RatePerSecond:        Quantity(p.RatePerSecond),
		Burst:                int32(p.Burst),
		CapacityPerSecond:    Quantity(p.CapacityPerSecond),
		QueueCapacity:        int32(p.QueueCapacity),
		MaxQueueWait:         metav1.Duration{Duration: p.MaxQueueWait},
		AcquireTimeout:       metav1.Duration{Duration: p.AcquireTimeout},
		Workers:              int32(p.Workers),
		RetryBudgetPerSecond: Quantity(p.RetryBudgetPerSecond),
	}
}

// demandStatus converts demand figures to status.demand; nil stays nil.
// In-flight counts are rounded up to whole calls, the goodput ceiling to
// thousandths, the shed fraction to two decimals ("0.90").
func demandStatus(d *sizing.Demand) *v1alpha1.DemandStatus {
	if d == nil {
		return nil
	}
	out := &v1alpha1.DemandStatus{
		InFlight:       wholeCalls(d.InFlight),
		GoodputCeiling: Quantity(d.GoodputCeilingPerSecond),
		ShedFraction:   strconv.FormatFloat(d.ShedFraction, 'f', 2, 64),
	}
	if d.WorstInFlight > 0 {
		worst := wholeCalls(d.WorstInFlight)
		out.WorstInFlight = &worst
	}
	return out
}

// diagnosticsStatus converts diagnostics to status.diagnostics. No
// diagnostics give nil, as a status read back from the API server has.
func diagnosticsStatus(diags []sizing.Diagnostic) []v1alpha1.Diagnostic {
	if len(diags) == 0 {
		return nil
	}
	out := make([]v1alpha1.Diagnostic, 0, len(diags))
	for _, d := range diags {
		out = append(out, v1alpha1.Diagnostic{Reason: d.Reason, Message: d.Message})
	}
	return out
}

// Quantity converts a non-negative rate to a resource.Quantity rounded to
// thousandths, or to whole units when thousandths would overflow.
func Quantity(f float64) resource.Quantity {
	if milli := math.Round(f * 1000); milli < math.MaxInt64/2 {
		return *resource.NewMilliQuantity(int64(milli), resource.DecimalSI)
	}
	return *resource.NewQuantity(int64(min(math.Round(f), math.MaxInt64/2)), resource.DecimalSI)
}

// wholeCalls rounds a count of calls up, saturating at the largest int32.
func wholeCalls(f float64) int32 {
	if c := math.Ceil(f); c < math.MaxInt32 {
		return int32(c)
	}
	return math.MaxInt32
}
