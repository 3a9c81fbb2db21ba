package storm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
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

// GoodputCeiling is the usable permits, floor(contract × safety), over the
// typical latency: the most successful downstream calls per second a plan
// that holds the contract completes.
func GoodputCeiling() float64 {
	return float64(Usable()) / TypicalLatency.Seconds()
}

// TimeScaleEnv names the environment variable that shortens (below 1) or
// stretches the schedule's timeline; see Schedule.Scaled.
const TimeScaleEnv = "STORM_TIME_SCALE"

// LatencyStep sets the downstream's latency from At on.
type LatencyStep struct {
	At      time.Duration
	Latency time.Duration
}

// ScaleStep is a scenario asking the HPA for Replicas at At.
type ScaleStep struct {
	At       time.Duration
	Replicas int32
}

// Phase is a named stretch of the timeline that the report summarises on its
// own. Settle is the start of the phase left out of its goodput, because
// calls admitted in the phase before are still draining.
type Phase struct {
	Name   string
	From   time.Duration
	To     time.Duration
	Settle time.Duration
	// Steady marks the phases at the typical latency with the replica count
	// settled, where the operator must reach the goodput goal.
	Steady bool
}

// Window returns the part of the phase that its goodput is measured over.
func (p Phase) Window() (from, to time.Duration) {
	from = min(p.From+p.Settle, p.To)
	return from, p.To
}

// Schedule is the scenario's timeline, identical for every variant. Times
// are offsets from the moment the load starts; the initial replicas are
// running and Ready before that.
type Schedule struct {
	// Duration is how long the load runs.
	Duration time.Duration
	// RequestsPerSecond is the open-loop load over all Ready pods.
	RequestsPerSecond float64
	// InitialReplicas run before the load starts.
	InitialReplicas int32
	// Latency steps, ascending; the first is at 0.
	Latency []LatencyStep
	// Scale steps, ascending: the replica counts a scenario asks the HPA
	// for (see DictateHPA). Without them the HPA decides on the pods'
	// demand.
	Scale []ScaleStep
	// Phases cover the timeline for the report.
	Phases []Phase
	// PodStartDelay stands for scheduling and container start: the time from
	// a Pod's creation to its process being started.
	PodStartDelay time.Duration
}

// DefaultSchedule is the scenario of the project's story, 70 seconds: 8 pods
// at the typical latency; the downstream's latency jumps to 1.8 s at 12 s
// and recovers at 34 s. The schedule has no scale steps: the real HPA
// decides them from the pods' demand (manifests/hpa.yaml), and in the
// operator's run it takes the workload from 8 to 16 pods a few seconds into
// the jitter and, once the lower demand has held for its 15-second
// stabilization window after the recovery, back to 8 from about 50 s on.
// Three phases are steady (the typical latency): before the jitter, the
// recovery, and the scale-down after it.
func DefaultSchedule() Schedule {
	const settle = 2 * time.Second // longer than the worst latency
	return Schedule{
		Duration:          70 * time.Second,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   8,
		Latency: []LatencyStep{
			{At: 0, Latency: TypicalLatency},
			{At: 12 * time.Second, Latency: WorstLatency},
			{At: 34 * time.Second, Latency: TypicalLatency},
		},
		Phases: []Phase{
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
func LaggardSchedule() Schedule {
	const settle = 2 * time.Second
	return Schedule{
		Duration:          32 * time.Second,
		RequestsPerSecond: RequestsPerSecond,
		InitialReplicas:   2,
		Latency:           []LatencyStep{{At: 0, Latency: TypicalLatency}},
		Scale: []ScaleStep{
			{At: 8 * time.Second, Replicas: 10},
			{At: 22 * time.Second, Replicas: 3},
		},
		Phases: []Phase{
			{Name: "2 pods", From: 0, To: 8 * time.Second, Settle: settle},
			{Name: "2→10 pods, one late", From: 8 * time.Second, To: 22 * time.Second, Settle: settle},
			{Name: "10→3 pods, one late", From: 22 * time.Second, To: 32 * time.Second, Settle: settle},
		},
		PodStartDelay: 1500 * time.Millisecond,
	}
}

// Scaled returns the schedule with every offset (steps, phases, duration)
// multiplied by f, for quicker runs. Latencies, the settle time and the pod
// start delay are physical and stay as they are.
func (s Schedule) Scaled(f float64) Schedule {
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	out := s
	out.Duration = scale(s.Duration)
	out.Latency = make([]LatencyStep, len(s.Latency))
	for i, st := range s.Latency {
		out.Latency[i] = LatencyStep{At: scale(st.At), Latency: st.Latency}
	}
	out.Scale = make([]ScaleStep, len(s.Scale))
	for i, st := range s.Scale {
		out.Scale[i] = ScaleStep{At: scale(st.At), Replicas: st.Replicas}
	}
	out.Phases = make([]Phase, len(s.Phases))
	for i, p := range s.Phases {
		p.From, p.To = scale(p.From), scale(p.To)
		out.Phases[i] = p
	}
	return out
}

// ScheduleFromEnv returns DefaultSchedule scaled by $STORM_TIME_SCALE when it
// is set.
func ScheduleFromEnv() (Schedule, error) {
	s := DefaultSchedule()
	v := os.Getenv(TimeScaleEnv)
	if v == "" {
		return s, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 10 {
		return Schedule{}, fmt.Errorf("storm: %s=%q: want a number in (0, 10]", TimeScaleEnv, v)
	}
	s = s.Scaled(f)
	return s, s.Validate()
}

// Validate reports a schedule the harness cannot run.
func (s Schedule) Validate() error {
	var errs []error
	if s.Duration <= 0 {
		errs = append(errs, errors.New("duration must be positive"))
	}
	if !(s.RequestsPerSecond > 0) {
		errs = append(errs, errors.New("requests per second must be positive"))
	}
	if s.InitialReplicas < 1 {
		errs = append(errs, errors.New("initial replicas must be at least 1"))
	}
	if len(s.Latency) == 0 || s.Latency[0].At != 0 {
		errs = append(errs, errors.New("the first latency step must be at 0"))
	}
	for i, st := range s.Latency {
		if st.Latency <= 0 {
			errs = append(errs, fmt.Errorf("latency step %d: latency must be positive", i))
		}
		if i > 0 && st.At <= s.Latency[i-1].At {
			errs = append(errs, fmt.Errorf("latency step %d: not after step %d", i, i-1))
		}
	}
	for i, st := range s.Scale {
		if st.Replicas < 1 {
			errs = append(errs, fmt.Errorf("scale step %d: replicas must be at least 1", i))
		}
		if st.At < 0 || st.At >= s.Duration || (i > 0 && st.At <= s.Scale[i-1].At) {
			errs = append(errs, fmt.Errorf("scale step %d: at %v is out of order or outside the run", i, st.At))
		}
	}
	for i, p := range s.Phases {
		if p.From < 0 || p.To <= p.From || p.To > s.Duration {
			errs = append(errs, fmt.Errorf("phase %q: [%v, %v) is empty or outside the run", p.Name, p.From, p.To))
		}
		if i > 0 && p.From < s.Phases[i-1].To {
			errs = append(errs, fmt.Errorf("phase %q overlaps the one before", p.Name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("storm: invalid schedule: %w", errors.Join(errs...))
	}
	return nil
}

// LatencyAt returns the downstream's latency at offset t.
func (s Schedule) LatencyAt(t time.Duration) time.Duration {
	lat := s.Latency[0].Latency
	for _, st := range s.Latency {
		if st.At > t {
			break
		}
		lat = st.Latency
	}
	return lat
}

// ReplicasAt returns the replica count the schedule has asked for at offset
// t: the initial replicas when the HPA decides.
func (s Schedule) ReplicasAt(t time.Duration) int32 {
	n := s.InitialReplicas
	for _, st := range s.Scale {
		if st.At > t {
			break
		}
		n = st.Replicas
	}
	return n
}

// MaxReplicas returns the most replicas the schedule ever asks for.
func (s Schedule) MaxReplicas() int32 {
	n := s.InitialReplicas
	for _, st := range s.Scale {
		n = max(n, st.Replicas)
	}
	return n
}
