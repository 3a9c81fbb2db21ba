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

// TestOwnRoomsGivenTheOperatorsShares: the storm's partial-load runs
// (their measured ratios literal) each admitted at least a point more than
// the model gives rooms of own permits with the shares those runs held,
// where the model with its own shares gives 0.965 (pinned), about what a
// run with poorer shares measured.
func TestOwnRoomsGivenTheOperatorsShares(t *testing.T) {
	for _, c := range []struct {
		balancer lossmodel.Balancer
		held     []int
		measured float64
	}{
		{lossmodel.Pinned, []int{4, 7, 4, 5, 4, 1, 2, 3}, 0.965},
		{lossmodel.Pinned, []int{5, 9, 3, 4, 3, 1, 2, 3}, 0.977},
		{lossmodel.Pinned, []int{4, 8, 4, 4, 4, 2, 1, 3}, 0.972},
		{lossmodel.Pinned, []int{4, 9, 3, 4, 4, 2, 1, 3}, 0.976},
		{lossmodel.Random, []int{4, 3, 3, 4, 4, 4, 4, 4}, 0.981},
	} {
		own, err := OwnRoomsRatioGiven(c.balancer, c.held)
		if err != nil {
			t.Fatal(err)
		}
		if c.measured-own < 0.01 {
			t.Errorf("%s, shares %v: measured %.3f, the model with rooms of own permits %.3f: want at least a point less", c.balancer, c.held, c.measured, own)
		}
	}
}
