package storm

import (
	"math"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
)

func TestDivisionMoves(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000, 0).Add(time.Duration(s) * time.Second) }
	plan := func(s int, a, b, c int) observe.Published {
		return observe.Published{Seen: at(s), Permits: 3, Pods: map[string]int{"a": a, "b": b, "c": c}}
	}
	tests := []struct {
		name string
		pub  []observe.Published
		want int
	}{
		{"nothing moves", []observe.Published{plan(0, 4, 4, 4), plan(20, 4, 4, 4)}, 0},
		// a is told 2 at once; b gets them once a let go: one move.
		{"a handover is one move", []observe.Published{plan(0, 4, 4, 4), plan(20, 2, 4, 4), plan(21, 2, 6, 4)}, 1},
		// a down, then back up before b got them: two moves.
		{"down and back up is two moves", []observe.Published{plan(0, 4, 4, 4), plan(20, 2, 4, 4), plan(35, 4, 4, 4)}, 2},
		{"two handovers are two moves", []observe.Published{plan(0, 4, 4, 4), plan(20, 2, 4, 4), plan(21, 2, 6, 4),
			plan(50, 2, 4, 4), plan(51, 2, 4, 6)}, 2},
		// b is raised back after its own move: its rise completes the
		// second move, in which c was lowered.
		{"the rise of a pod lowered by an earlier, completed move", []observe.Published{plan(0, 4, 4, 4), plan(20, 4, 2, 4), plan(21, 6, 2, 4),
			plan(50, 6, 2, 2), plan(51, 6, 4, 2)}, 2},
		{"plans outside the window are not counted", []observe.Published{plan(0, 4, 4, 4), plan(5, 2, 4, 4), plan(6, 2, 6, 4), plan(20, 2, 6, 4)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(divisionMoves(tc.pub, at(10), at(100))); got != tc.want {
				t.Errorf("divisionMoves() counts %d, want %d", got, tc.want)
			}
		})
	}
}

func TestShortestGap(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000, 0).Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		at   []time.Time
		want time.Duration
	}{
		{nil, 0},
		{[]time.Time{at(5)}, 0},
		{[]time.Time{at(5), at(70)}, 65 * time.Second},
		{[]time.Time{at(5), at(70), at(80)}, 10 * time.Second},
	} {
		if got := shortestGap(tc.at); got != tc.want {
			t.Errorf("shortestGap(%v) = %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestMeanShares(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000, 0).Add(time.Duration(s) * time.Second) }
	plan := func(s int, a, b int) observe.Published {
		return observe.Published{Seen: at(s), Permits: 3, Pods: map[string]int{"a": a, "b": b}}
	}
	// Measured from 10 to 110: a holds 4 until 60 and 2 after, b 4 then
	// 6; the plan seen at 0 is in force from 10, the one at 120 never.
	// c is named by no plan and holds the base share, 3.
	pub := []observe.Published{plan(0, 4, 4), plan(60, 2, 6), plan(120, 9, 9)}
	got := meanShares(pub, []string{"a", "b", "c"}, at(10), at(110))
	want := []float64{3, 5, 3}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("meanShares() = %v, want %v", got, want)
			break
		}
	}
}
