package storm

import (
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// storySchedule is DefaultSchedule with the scale steps the story's HPA
// takes, asked for by the scenario: 8 → 16 pods during the jitter, 16 → 4
// after it.
func storySchedule() schedule.Schedule {
	s := DefaultSchedule()
	s.Scale = []schedule.ScaleStep{{At: 22 * time.Second, Replicas: 16}, {At: 46 * time.Second, Replicas: 4}}
	return s
}

func TestDefaultScheduleIsValid(t *testing.T) {
	s := DefaultSchedule()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Duration > 80*time.Second {
		t.Errorf("Duration = %v; three variants and the set-up must fit in 5 minutes", s.Duration)
	}
	var steady int
	for _, p := range s.Phases {
		if p.Steady {
			steady++
			if s.LatencyAt(p.From) != TypicalLatency {
				t.Errorf("steady phase %q is not at the typical latency", p.Name)
			}
		}
	}
	if steady != 3 {
		t.Errorf("%d steady phases, want 3 (before the jitter, the recovery and the scale-down)", steady)
	}
	if len(s.Scale) != 0 || s.ReplicasAt(s.Duration) != s.InitialReplicas {
		t.Errorf("DefaultSchedule() has scale steps %v: the HPA decides them", s.Scale)
	}
	if err := storySchedule().Validate(); err != nil {
		t.Error(err)
	}
	if l := LaggardSchedule(); l.Validate() != nil || l.Duration > 40*time.Second {
		t.Errorf("LaggardSchedule() = %+v: invalid or longer than 40s (%v)", l, l.Validate())
	}
}

func TestScheduleFromEnv(t *testing.T) {
	t.Setenv(TimeScaleEnv, "")
	s, err := ScheduleFromEnv()
	if err != nil || s.Duration != DefaultSchedule().Duration {
		t.Fatalf("unset: %v, %v", s.Duration, err)
	}
	t.Setenv(TimeScaleEnv, "0.25")
	if s, err = ScheduleFromEnv(); err != nil || s.Duration != 17500*time.Millisecond {
		t.Fatalf("0.25: %v, %v", s.Duration, err)
	}
	for _, bad := range []string{"x", "0", "-1", "11", "NaN"} {
		t.Setenv(TimeScaleEnv, bad)
		if _, err := ScheduleFromEnv(); err == nil {
			t.Errorf("%s=%q: no error", TimeScaleEnv, bad)
		}
	}
}

func TestGoodputCeiling(t *testing.T) {
	// 50 × 0.8 / 0.22 s
	if got := GoodputCeiling(); got < 181.8 || got > 181.9 {
		t.Errorf("GoodputCeiling() = %v, want 181.8…", got)
	}
}
