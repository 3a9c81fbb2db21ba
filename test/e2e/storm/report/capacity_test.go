package report

import (
	"math"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

func TestPreviousShare(t *testing.T) {
	for _, tt := range []struct{ usable, divisor, want int }{{40, 8, 5}, {40, 16, 2}, {40, 10, 4}, {40, 41, 0}, {40, 0, 40}} {
		if got := PreviousShare(tt.usable, tt.divisor); got != tt.want {
			t.Errorf("PreviousShare(%d, %d) = %d, want %d", tt.usable, tt.divisor, got, tt.want)
		}
	}
}

// TestCapacityLaggard replays a 2 → 10 scale-up at 5 s whose new pods are
// Ready at 6.5 s, with a laggard applying plans 2 s late, against the
// previous division's model, and integrates a measured dip.
func TestCapacityLaggard(t *testing.T) {
	s := schedule.Schedule{Duration: 10 * time.Second, InitialReplicas: 2, Scale: []schedule.ScaleStep{{At: 5 * time.Second, Replicas: 10}}}
	d := &RunData{Name: "laggard", Operator: true, LaggardDelay: 2 * time.Second, Downstream: story, Schedule: s,
		Scales: []cluster.ScaleEvent{{At: time.Time{}.Add(5 * time.Second), From: 2, To: 10}}}
	for off := time.Duration(0); off <= s.Duration; off += SampleInterval {
		sm := Sample{At: off, Pods: cluster.PodCounts{Desired: 2, Existing: 2, Started: 2, Ready: 2}, ReadyPermits: 40, LaggardRunning: true, LaggardReady: true}
		if off >= 5*time.Second {
			sm.Pods = cluster.PodCounts{Desired: 10, Existing: 10, Started: 2, Ready: 2}
		}
		if off >= 6500*time.Millisecond {
			sm.Pods.Started, sm.Pods.Ready = 10, 10
		}
		if off >= 6*time.Second && off < 8*time.Second {
			sm.ReadyPermits = 20 // measured: a 2 s dip to half
		}
		d.Samples = append(d.Samples, sm)
	}
	c := capacity(d, nil)
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	if c.Usable != 40 || !near(c.Seconds, 10) {
		t.Errorf("usable %d over %vs, want 40 over 10s", c.Usable, c.Seconds)
	}
	// Measured: 20 permits lost for 2 s.
	if !near(c.LostPermitSeconds, 40) || !near(c.HeldFraction, 1-40.0/400) {
		t.Errorf("measured: lost %v, held %v; want 40 and 0.9", c.LostPermitSeconds, c.HeldFraction)
	}
	// Previous division: from 5 s to 6.5 s the two Ready pods hold 4 and
	// the laggard's stale 20 (16 lost for 1.5 s); from 6.5 s to 7 s the
	// laggard's 20 and 9 × 4 are 56 in all, capped at 40.
	if !near(c.PreviousLostPermitSeconds, 24) {
		t.Errorf("previous: lost %v, want 24", c.PreviousLostPermitSeconds)
	}
	if c.PreviousPeakPermits != 56 || !near(c.PreviousOverContractSeconds, 0.5) {
		t.Errorf("previous: peak %d over the contract for %vs, want 56 for 0.5s", c.PreviousPeakPermits, c.PreviousOverContractSeconds)
	}
	if len(c.Steps) != 2 || !near(c.Steps[0].Lost, 0) || !near(c.Steps[1].Lost, 40) || !near(c.Steps[1].PreviousLost, 24) || c.Steps[1].Replicas != 10 {
		t.Errorf("steps %+v", c.Steps)
	}
}
