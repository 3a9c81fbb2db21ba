package storm

import (
	"slices"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
)

func TestRoundShares(t *testing.T) {
	for _, c := range []struct {
		mean  []float64
		total int
		want  []int
	}{
		{[]float64{4, 6.82, 3.79, 4.79, 3.79, 1.79, 2, 3}, 30, []int{4, 7, 4, 5, 4, 1, 2, 3}},
		{[]float64{4.5, 10.9, 3.2, 4.1, 3.5, 2.6, 2.1, 3.1}, 34, []int{5, 11, 3, 4, 3, 3, 2, 3}},
		{[]float64{3.5, 3.5}, 7, []int{4, 3}},
		{[]float64{2.2, 3.7}, 6, []int{2, 4}},
		{[]float64{4, 4}, 7, []int{4, 3}},
		{[]float64{1, 1}, 2, []int{1, 1}},
	} {
		if got := roundShares(c.mean, c.total); !slices.Equal(got, c.want) {
			t.Errorf("roundShares(%v, %d) = %v, want %v", c.mean, c.total, got, c.want)
		}
	}
}

// TestRatioGiven: given the model's own shares, the model's ratio is the
// prediction; given equal shares of the 34 permits outside the reserve
// behind pinned connections, where the busiest pod needs about 12, it is
// lower.
func TestRatioGiven(t *testing.T) {
	for _, b := range []lossmodel.Balancer{lossmodel.Random, lossmodel.Pinned} {
		pred, err := PredictPartialLoad(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RatioGiven(b, pred.Shares)
		if err != nil {
			t.Fatal(err)
		}
		if got != pred.Ratio {
			t.Errorf("%s: given the model's shares %v: %.4f, want the prediction %.4f", b, pred.Shares, got, pred.Ratio)
		}
	}
	pred, err := PredictPartialLoad(lossmodel.Pinned)
	if err != nil {
		t.Fatal(err)
	}
	equal, err := RatioGiven(lossmodel.Pinned, []int{5, 5, 4, 4, 4, 4, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	if equal >= pred.Ratio {
		t.Errorf("pinned, equal shares: %.4f, want below the prediction with shares that follow demand, %.4f", equal, pred.Ratio)
	}
}
