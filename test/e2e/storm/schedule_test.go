package storm

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// storySchedule is DefaultSchedule with the scale steps the story's HPA
// takes, asked for by the scenario: 8 → 16 pods during the jitter, 16 → 4
// after it.
func storySchedule() Schedule {
	s := DefaultSchedule()
	s.Scale = []ScaleStep{{At: 22 * time.Second, Replicas: 16}, {At: 46 * time.Second, Replicas: 4}}
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

func TestScheduleAt(t *testing.T) {
	s := storySchedule()
	tests := []struct {
		at       time.Duration
		latency  time.Duration
		replicas int32
	}{
		{0, TypicalLatency, 8},
		{12*time.Second - 1, TypicalLatency, 8},
		{12 * time.Second, WorstLatency, 8},
		{22 * time.Second, WorstLatency, 16},
		{34 * time.Second, TypicalLatency, 16},
		{46 * time.Second, TypicalLatency, 4},
		{70 * time.Second, TypicalLatency, 4},
	}
	for _, tt := range tests {
		if got := s.LatencyAt(tt.at); got != tt.latency {
			t.Errorf("LatencyAt(%v) = %v, want %v", tt.at, got, tt.latency)
		}
		if got := s.ReplicasAt(tt.at); got != tt.replicas {
			t.Errorf("ReplicasAt(%v) = %d, want %d", tt.at, got, tt.replicas)
		}
	}
	if got := s.MaxReplicas(); got != 16 {
		t.Errorf("MaxReplicas() = %d, want 16", got)
	}
}

func TestScheduleScaled(t *testing.T) {
	s := storySchedule().Scaled(0.5)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []ScaleStep{{At: 11 * time.Second, Replicas: 16}, {At: 23 * time.Second, Replicas: 4}}
	if diff := cmp.Diff(want, s.Scale); diff != "" {
		t.Errorf("Scale (-want +got):\n%s", diff)
	}
	if s.Duration != 35*time.Second || s.Latency[1].Latency != WorstLatency || s.PodStartDelay != DefaultSchedule().PodStartDelay {
		t.Errorf("Scaled(0.5) = %+v: offsets halve, latencies and the start delay stay", s)
	}
	if s.Phases[0].Settle != DefaultSchedule().Phases[0].Settle {
		t.Errorf("the settle time must not scale")
	}
	// The original is unchanged.
	if storySchedule().Scale[0].At != 22*time.Second {
		t.Error("Scaled changed its receiver")
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

func TestScheduleValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Schedule)
		want string
	}{
		{"no duration", func(s *Schedule) { s.Duration = 0 }, "duration"},
		{"no load", func(s *Schedule) { s.RequestsPerSecond = 0 }, "requests per second"},
		{"latency not from 0", func(s *Schedule) { s.Latency[0].At = time.Second }, "first latency step"},
		{"latency out of order", func(s *Schedule) { s.Latency[2].At = s.Latency[1].At }, "not after"},
		{"scale beyond the run", func(s *Schedule) { s.Scale[1].At = s.Duration }, "outside the run"},
		{"zero replicas", func(s *Schedule) { s.Scale[0].Replicas = 0 }, "at least 1"},
		{"overlapping phases", func(s *Schedule) { s.Phases[1].From = s.Phases[0].From }, "overlaps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storySchedule()
			tt.edit(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error about %q", err, tt.want)
			}
		})
	}
}

func TestGoodputCeiling(t *testing.T) {
	// 50 × 0.8 / 0.22 s
	if got := GoodputCeiling(); got < 181.8 || got > 181.9 {
		t.Errorf("GoodputCeiling() = %v, want 181.8…", got)
	}
}
