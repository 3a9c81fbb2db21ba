package division

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExact(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   int64
		pods    []string
		current []int64
		want    []int64
	}{
		{name: "even", total: 40, pods: []string{"a", "b", "c", "d"}, want: []int64{10, 10, 10, 10}},
		{name: "remainder by name", total: 40, pods: []string{"c", "a", "b"}, want: []int64{13, 14, 13}},
		{name: "sticky extra", total: 40, pods: []string{"a", "b", "c"}, current: []int64{13, 13, 14}, want: []int64{13, 13, 14}},
		{name: "extra to who holds most", total: 41, pods: []string{"a", "b", "c", "d"}, current: []int64{0, 10, 11, 10}, want: []int64{10, 10, 11, 10}},
		{name: "21 replicas use all 40", total: 40, pods: names(21), want: append(repeat(2, 19), 1, 1)},
		{name: "below one", total: 3, pods: []string{"a", "b", "c", "d", "e"}, want: []int64{1, 1, 1, 0, 0}},
		{name: "below one sticky", total: 3, pods: []string{"a", "b", "c", "d", "e"}, current: []int64{0, 0, 1, 1, 1}, want: []int64{0, 0, 1, 1, 1}},
		{name: "zero", total: 0, pods: []string{"a", "b"}, want: []int64{0, 0}},
		{name: "no pods", total: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Exact(tc.total, tc.pods, tc.current)); diff != "" {
				t.Errorf("Exact(%d, %v, %v) (-want +got):\n%s", tc.total, tc.pods, tc.current, diff)
			}
		})
	}
}

// TestExactInvariants checks, over random inputs from a fixed seed, that
// Exact hands out exactly total, that shares differ by at most one, and
// that a pod holding base+1 keeps it whenever no more pods than there are
// extra permits hold base+1 or more (in a still world, none holds more).
func TestExactInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for c := range 10000 {
		n := 1 + rng.IntN(70)
		total := rng.Int64N(200)
		pods := names(n)
		rng.Shuffle(n, func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		current := make([]int64, n)
		for i := range current {
			current[i] = rng.Int64N(6)
		}
		got := Exact(total, pods, current)
		var sum int64
		for _, s := range got {
			sum += s
		}
		lo, hi := slices.Min(got), slices.Max(got)
		base, extra := total/int64(n), total%int64(n)
		if sum != total || lo != base || (extra > 0 && hi != base+1) || (extra == 0 && hi != base) {
			t.Fatalf("case %d: Exact(%d, %d pods) = %v: sum %d, min %d, max %d", c, total, n, got, sum, lo, hi)
		}
		holding := 0
		for i := range current {
			if current[i] >= base+1 {
				holding++
			}
		}
		for i := range current {
			if extra > 0 && current[i] == base+1 && int64(holding) <= extra && got[i] != base+1 {
				t.Fatalf("case %d: pod %s held the extra permit and lost it: current %v, got %v", c, pods[i], current, got)
			}
		}
	}
}

func TestTargets(t *testing.T) {
	got := Targets(7, []Member{
		{Key: "a", Serving: true, Told: 3},
		{Key: "b", Serving: false, Told: 2},
		{Key: "c", Serving: true},
	})
	if diff := cmp.Diff([]int64{4, 0, 3}, got); diff != "" {
		t.Errorf("Targets (-want +got):\n%s", diff)
	}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pod-%03d", i)
	}
	return out
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
