package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// storySchedule is DefaultSchedule with the scale steps the story's HPA
// takes, asked for by the scenario: 8 → 16 pods during the jitter, 16 → 4
// after it.
func storySchedule() schedule.Schedule {
	s := storm.DefaultSchedule()
	s.Scale = []schedule.ScaleStep{{At: 22 * time.Second, Replicas: 16}, {At: 46 * time.Second, Replicas: 4}}
	return s
}

func TestScheduleAt(t *testing.T) {
	s := storySchedule()
	tests := []struct {
		at       time.Duration
		latency  time.Duration
		replicas int32
	}{
		{0, storm.TypicalLatency, 8},
		{12*time.Second - 1, storm.TypicalLatency, 8},
		{12 * time.Second, storm.WorstLatency, 8},
		{22 * time.Second, storm.WorstLatency, 16},
		{34 * time.Second, storm.TypicalLatency, 16},
		{46 * time.Second, storm.TypicalLatency, 4},
		{70 * time.Second, storm.TypicalLatency, 4},
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
	want := []schedule.ScaleStep{{At: 11 * time.Second, Replicas: 16}, {At: 23 * time.Second, Replicas: 4}}
	if diff := cmp.Diff(want, s.Scale); diff != "" {
		t.Errorf("Scale (-want +got):\n%s", diff)
	}
	if s.Duration != 35*time.Second || s.Latency[1].Latency != storm.WorstLatency || s.PodStartDelay != storm.DefaultSchedule().PodStartDelay {
		t.Errorf("Scaled(0.5) = %+v: offsets halve, latencies and the start delay stay", s)
	}
	if s.Phases[0].Settle != storm.DefaultSchedule().Phases[0].Settle {
		t.Errorf("the settle time must not scale")
	}
	// The original is unchanged.
	if storySchedule().Scale[0].At != 22*time.Second {
		t.Error("Scaled changed its receiver")
	}
}

func TestScheduleValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*schedule.Schedule)
		want string
	}{
		{"no duration", func(s *schedule.Schedule) { s.Duration = 0 }, "duration"},
		{"no load", func(s *schedule.Schedule) { s.RequestsPerSecond = 0 }, "requests per second"},
		{"latency not from 0", func(s *schedule.Schedule) { s.Latency[0].At = time.Second }, "first latency step"},
		{"latency out of order", func(s *schedule.Schedule) { s.Latency[2].At = s.Latency[1].At }, "not after"},
		{"scale beyond the run", func(s *schedule.Schedule) { s.Scale[1].At = s.Duration }, "outside the run"},
		{"zero replicas", func(s *schedule.Schedule) { s.Scale[0].Replicas = 0 }, "at least 1"},
		{"overlapping phases", func(s *schedule.Schedule) { s.Phases[1].From = s.Phases[0].From }, "overlaps"},
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
