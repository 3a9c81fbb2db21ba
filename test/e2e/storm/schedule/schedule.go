package schedule

import (
	"errors"
	"fmt"
	"time"
)

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

// Schedule is a scenario's timeline, identical for every variant of it. Times
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
	// for (see cluster.DictateHPA). Without them the HPA decides on the pods'
	// demand.
	Scale []ScaleStep
	// Phases cover the timeline for the report.
	Phases []Phase
	// PodStartDelay stands for scheduling and container start: the time from
	// a Pod's creation to its process being started.
	PodStartDelay time.Duration
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
