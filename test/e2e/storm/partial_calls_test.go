package storm

import (
	"math"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/controller"
	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
)

// The partial-load calls arrive at the asked rate, their latencies have the
// asked mean and coefficient of variation, a random balancer spreads them
// evenly, and pinned connections follow the model's weights; the same seed
// draws the same calls.
func TestPartialCalls(t *testing.T) {
	const perSecond, d = 145.45, 2000 * time.Second
	for _, b := range []lossmodel.Balancer{lossmodel.Random, lossmodel.Pinned} {
		calls := partialCalls(PartialSeed, b, PartialPods, PartialSkew, perSecond, PartialLatency, PartialLatencyCV, d)
		if rate := float64(len(calls)) / d.Seconds(); math.Abs(rate-perSecond)/perSecond > 0.02 {
			t.Errorf("%s: %.1f calls/s, want %.1f ± 2 %%", b, rate, perSecond)
		}
		var sum, sum2 float64
		perPod := make([]float64, PartialPods)
		for i, c := range calls {
			if i > 0 && c.At < calls[i-1].At {
				t.Fatalf("%s: call %d at %v before call %d at %v", b, i, c.At, i-1, calls[i-1].At)
			}
			l := c.Latency.Seconds()
			sum, sum2 = sum+l, sum2+l*l
			perPod[c.Pod]++
		}
		n := float64(len(calls))
		mean := sum / n
		cv := math.Sqrt(sum2/n-mean*mean) / mean
		if math.Abs(mean-PartialLatency.Seconds()) > 0.005 || math.Abs(cv-PartialLatencyCV) > 0.02 {
			t.Errorf("%s: latency mean %.4fs cv %.3f, want %.3fs and %.2f", b, mean, cv, PartialLatency.Seconds(), PartialLatencyCV)
		}
		want := lossmodel.Weights(PartialSeed, PartialPods, PartialSkew)
		for p := range perPod {
			w := 1.0 / PartialPods
			if b == lossmodel.Pinned {
				w = want[p]
			}
			if got := perPod[p] / n; math.Abs(got-w) > 0.01 {
				t.Errorf("%s: pod %d receives %.3f of the calls, want %.3f", b, p, got, w)
			}
		}
		again := partialCalls(PartialSeed, b, PartialPods, PartialSkew, perSecond, PartialLatency, PartialLatencyCV, d)
		if len(again) != len(calls) || again[len(again)/2] != calls[len(calls)/2] {
			t.Errorf("%s: the same seed drew other calls", b)
		}
	}
}

// The model's prediction for the scenario: the reserve wins back most of
// what equal shares lose, with at most half of the admitted calls
// borrowed, and pinned connections lose more than a random balancer.
func TestPredictPartialLoad(t *testing.T) {
	random, err := PredictPartialLoad(lossmodel.Random)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := PredictPartialLoad(lossmodel.Pinned)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]PartialPrediction{"random": random, "pinned": pinned} {
		if p.Ratio <= p.EqualSharesRatio || p.Ratio > 1 || p.BorrowedFraction <= 0 || p.BorrowedFraction > 0.5 {
			t.Errorf("%s: %+v: want equal shares < the reserve's ratio ≤ 1 and 0 < borrowed ≤ 0.5", name, p)
		}
	}
	if pinned.EqualSharesRatio >= random.EqualSharesRatio {
		t.Errorf("equal shares: pinned %.3f, random %.3f; pinned connections must lose more", pinned.EqualSharesRatio, random.EqualSharesRatio)
	}
}

// TestPartialDemandWindow: the demand the operator reads covers its whole
// read interval.
func TestPartialDemandWindow(t *testing.T) {
	if PartialDemandWindow != controller.DefaultDemandInterval {
		t.Errorf("PartialDemandWindow %s, the operator's demand interval %s: want them equal", PartialDemandWindow, controller.DefaultDemandInterval)
	}
}
