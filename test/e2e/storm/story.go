package storm

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// The downstream's contract and the workload's demand in the scenario: the
// story of the project's README.
const (
	// Contract is the downstream's global in-flight limit; it answers 429 to
	// any call beyond it.
	Contract = 50
	// SafetyPercent is the part of the contract the operator hands out.
	SafetyPercent = 80
	// TypicalLatency is the downstream's usual response time.
	TypicalLatency = 220 * time.Millisecond
	// WorstLatency is its response time during its own deploys.
	WorstLatency = 1800 * time.Millisecond
	// RequestsPerSecond is the open-loop load over all pods.
	RequestsPerSecond = 1900
)

// theDownstream is the story's downstream as the reports need it.
var theDownstream = report.Downstream{Contract: Contract, SafetyPercent: SafetyPercent, TypicalLatency: TypicalLatency}

// Usable returns the permits the scenario's quota hands out:
// floor(contract × safety).
func Usable() int { return theDownstream.Usable() }

// GoodputCeiling is the usable permits, floor(contract × safety), over the
// typical latency: the most successful downstream calls per second a plan
// that holds the contract completes.
func GoodputCeiling() float64 { return theDownstream.GoodputCeiling() }

// NewReport starts a report of the story's downstream on the schedule s.
func NewReport(s schedule.Schedule) *report.Report { return report.New(theDownstream, s) }

// TimeScaleEnv names the environment variable that shortens (below 1) or
// stretches the schedule's timeline; see Schedule.Scaled.
const TimeScaleEnv = "STORM_TIME_SCALE"

// DefaultSchedule is the scenario of the project's story, 70 seconds: 8 pods
// at the typical latency; the downstream's latency jumps to 1.8 s at 12 s
// and recovers at 34 s. The schedule has no scale steps: the real HPA
// decides them from the pods' demand (manifests/hpa.yaml), and in the
// operator's run it takes the workload from 8 to 16 pods a few seconds into
// the jitter and, once the lower demand has held for its 15-second
// stabilization window after the recovery, back to 8 from about 50 s on.
// Three phases are steady (the typical latency): before the jitter, the
// recovery, and the scale-down after it.
func DefaultSchedule() schedule.Schedule {
	const settle = 2 * time.Second // longer than the worst latency
	return schedule.Schedule{
		Duration:          70 * time.Second,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   8,
		Latency: []schedule.LatencyStep{
			{At: 0, Latency: TypicalLatency},
			{At: 12 * time.Second, Latency: WorstLatency},
			{At: 34 * time.Second, Latency: TypicalLatency},
		},
		Phases: []schedule.Phase{
			{Name: "steady, 8 pods", From: 0, To: 12 * time.Second, Settle: settle, Steady: true},
			{Name: "jitter, the HPA scales up", From: 12 * time.Second, To: 34 * time.Second, Settle: settle},
			{Name: "recovery", From: 34 * time.Second, To: 46 * time.Second, Settle: settle, Steady: true},
			{Name: "steady, the HPA scales down", From: 46 * time.Second, To: 70 * time.Second, Settle: settle, Steady: true},
		},
		PodStartDelay: 1500 * time.Millisecond,
	}
}

// LaggardDelay is how late the laggard scenario's slow pod applies every
// new plan.
const LaggardDelay = 5 * time.Second

// LaggardSchedule is the laggard scenario, 32 seconds at the typical
// latency: 2 pods, 20 permits each; at 8 s the scenario asks the HPA for 10
// (see DictateHPA), and
// one of the two old pods applies its smaller share LaggardDelay late; at
// 22 s it asks for 3, and the laggard applies its larger share late. The
// previous division (4 permits for every pod at 10 pods, applied by old
// pods before new pods start) would have let the laggard keep 20 while 9
// pods took 4 each: 56 permits against a contract of 50.
func LaggardSchedule() schedule.Schedule {
	const settle = 2 * time.Second
	return schedule.Schedule{
		Duration:          32 * time.Second,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   2,
		Latency:           []schedule.LatencyStep{{At: 0, Latency: TypicalLatency}},
		Scale: []schedule.ScaleStep{
			{At: 8 * time.Second, Replicas: 10},
			{At: 22 * time.Second, Replicas: 3},
		},
		Phases: []schedule.Phase{
			{Name: "2 pods", From: 0, To: 8 * time.Second, Settle: settle},
			{Name: "2→10 pods, one late", From: 8 * time.Second, To: 22 * time.Second, Settle: settle},
			{Name: "10→3 pods, one late", From: 22 * time.Second, To: 32 * time.Second, Settle: settle},
		},
		PodStartDelay: 1500 * time.Millisecond,
	}
}

// ScheduleFromEnv returns DefaultSchedule scaled by $STORM_TIME_SCALE when it
// is set.
func ScheduleFromEnv() (schedule.Schedule, error) {
	s := DefaultSchedule()
	v := os.Getenv(TimeScaleEnv)
	if v == "" {
		return s, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 10 {
		return schedule.Schedule{}, fmt.Errorf("storm: %s=%q: want a number in (0, 10]", TimeScaleEnv, v)
	}
	s = s.Scaled(f)
	return s, s.Validate()
}
