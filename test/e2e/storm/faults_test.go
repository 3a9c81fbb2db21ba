//go:build unix

package storm

import (
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// Every fault scenario's timeline is one the harness can run, and its
// faults come before the load ends.
func TestFaultSchedules(t *testing.T) {
	for name, tc := range map[string]struct {
		s      schedule.Schedule
		faults []time.Duration
	}{
		"failover":      {FailoverSchedule(), []time.Duration{FailoverScaleAt}},
		"restart":       {RestartSchedule(), []time.Duration{RestartAt}},
		"finished pods": {FinishedPodsSchedule(), []time.Duration{FinishedPodsAt}},
		"statefulset":   {StatefulSetSchedule(), []time.Duration{StatefulSetRecreateAt}},
	} {
		if err := tc.s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, p := range tc.s.Phases {
			if p.Settle != faultSettle {
				t.Errorf("%s: phase %q settles in %v, want %v", name, p.Name, p.Settle, faultSettle)
			}
		}
		for _, at := range tc.faults {
			if at <= 0 || at >= tc.s.Duration {
				t.Errorf("%s: a fault at %v is outside the run of %v", name, at, tc.s.Duration)
			}
		}
	}
}
