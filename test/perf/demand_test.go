package perf

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// sharesPolicy is the shares policy BACKPRESSURE_PERF_SHARES asks the churn
// quotas for: Equal (the default) or Demand.
func sharesPolicy(t *testing.T) v1alpha1.SharesPolicy {
	switch v := os.Getenv("BACKPRESSURE_PERF_SHARES"); v {
	case "", string(v1alpha1.SharesEqual):
		return v1alpha1.SharesEqual
	case string(v1alpha1.SharesDemand):
		return v1alpha1.SharesDemand
	default:
		t.Fatalf("BACKPRESSURE_PERF_SHARES=%q: want %s or %s", v, v1alpha1.SharesEqual, v1alpha1.SharesDemand)
		return ""
	}
}

// noisyDemand plays the custom metrics API for demand-following quotas at
// steady load: every pod of a workload has the same mean demand, and each
// read draws it afresh, as the gauge the library exports (in flight,
// waiting and shed, averaged over the adapter's window) varies around its
// mean. A reading is the mean of window Poisson draws, rounded: Poisson
// arrivals seen through an average.
type noisyDemand struct {
	// pods lists each workload's pod names by the workload's name.
	pods map[string][]string
	// mean is each pod's mean demand in permits.
	mean float64
	// window is the draws a reading averages.
	window int

	mu    sync.Mutex
	rng   *rand.Rand
	reads int
}

func newNoisyDemand(pods map[string][]string, mean float64) *noisyDemand {
	return &noisyDemand{pods: pods, mean: mean, window: 20, rng: rand.New(rand.NewPCG(1, 2))}
}

// Read implements demand.Source.
func (d *noisyDemand) Read(_ context.Context, _ string, sel labels.Selector, _ string) (map[string]int64, error) {
	workload, _ := sel.RequiresExactMatch(builders.AppLabel)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	out := make(map[string]int64, len(d.pods[workload]))
	for _, pod := range d.pods[workload] {
		sum := 0
		for range d.window {
			sum += poisson(d.rng, d.mean)
		}
		out[pod] = int64(math.Round(float64(sum) / float64(d.window)))
	}
	return out, nil
}

// count returns the reads so far.
func (d *noisyDemand) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}

// poisson draws from a Poisson distribution of mean m (Knuth's method;
// the means here are a few permits).
func poisson(r *rand.Rand, m float64) int {
	limit, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= r.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}
