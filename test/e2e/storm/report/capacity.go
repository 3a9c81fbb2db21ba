package report

import (
	"time"
)

// PreviousShare is the per-pod share of the division the operator made
// before issue 10: floor(usable / divisor) for every pod, with the divisor
// max(spec replicas, HPA desired, existing pods) and, under belowOne: Strict,
// 0 when there are more pods than permits.
func PreviousShare(usable, divisor int) int {
	if divisor < 1 {
		return usable
	}
	return usable / divisor
}

// CapacityReport compares the permits the Ready pods held over a run with
// the usable total, measured and for the previous division on the same
// schedule.
//
// Measured: at every sample, the sum over the pods in the endpoints of the
// permits each pod's gate enforces, as the pod reports it in its "Applied
// plan" log line (the same number as its backpressure_gate_permits metric,
// at the moment it changes), capped at the usable total.
//
// Previous division: a model replayed over the run's own pod timeline (the
// sampled replica count, existing and Ready pods): every pod enforces
// PreviousShare(usable, max(desired, existing)) from the moment the divisor
// changes (old pods apply it before new pods start, as they did; a laggard,
// when there is one, applies it Laggard later), and the Ready pods hold that
// share each.
type CapacityReport struct {
	// Usable is the usable total, in permits.
	Usable int `json:"usable"`
	// Seconds is the duration integrated over.
	Seconds float64 `json:"seconds"`
	// HeldFraction is the permit-seconds the Ready pods held over Usable ×
	// Seconds, measured.
	HeldFraction float64 `json:"heldFraction"`
	// PreviousHeldFraction is the same for the previous division.
	PreviousHeldFraction float64 `json:"previousHeldFraction"`
	// LostPermitSeconds and PreviousLostPermitSeconds are Usable × Seconds
	// minus the permit-seconds held.
	LostPermitSeconds         float64 `json:"lostPermitSeconds"`
	PreviousLostPermitSeconds float64 `json:"previousLostPermitSeconds"`
	// PreviousPeakPermits is the most permits the previous division would
	// have let the running pods hold together: with a laggard, what it would
	// have kept while the other pods took their new shares.
	PreviousPeakPermits int `json:"previousPeakPermits"`
	// PreviousOverContractSeconds is how long that sum would have been above
	// the contract.
	PreviousOverContractSeconds float64 `json:"previousOverContractSeconds"`
	// Steps break the losses down by the stretch from each scale step to
	// the next (the first stretch starts at 0).
	Steps []CapacityStep `json:"steps"`
}

// CapacityStep is the capacity lost between two of the HPA's decisions.
type CapacityStep struct {
	// From and To are the stretch's offsets in seconds.
	From float64 `json:"fromSeconds"`
	To   float64 `json:"toSeconds"`
	// Replicas is the replica count the HPA set at From.
	Replicas int32 `json:"replicas"`
	// Lost and PreviousLost are the permit-seconds below the usable total,
	// measured and for the previous division.
	Lost         float64 `json:"lostPermitSeconds"`
	PreviousLost float64 `json:"previousLostPermitSeconds"`
}

// capacity integrates the samples of a run (left Riemann sums over the
// sampling interval). When tl has a point per sample, it receives the
// previous division's figures too.
func capacity(d *RunData, tl []TimelinePoint) *CapacityReport {
	usable := d.Downstream.Usable()
	r := &CapacityReport{Usable: usable}
	if len(d.Samples) == 0 {
		return r
	}
	s := d.Schedule
	// The stretches between the HPA's decisions, as they happened.
	bounds, replicas := []time.Duration{0}, []int32{s.InitialReplicas}
	for _, sc := range d.Scales {
		if off := sc.At.Sub(d.Start); off > bounds[len(bounds)-1] && off < s.Duration {
			bounds, replicas = append(bounds, off), append(replicas, sc.To)
		} else if off >= 0 && off < s.Duration {
			replicas[len(replicas)-1] = sc.To
		}
	}
	for i, b := range bounds {
		to := s.Duration
		if i+1 < len(bounds) {
			to = bounds[i+1]
		}
		r.Steps = append(r.Steps, CapacityStep{From: b.Seconds(), To: to.Seconds(), Replicas: replicas[i]})
	}
	share := func(sm Sample) int {
		return PreviousShare(usable, max(int(sm.Pods.Desired), sm.Pods.Existing))
	}
	var held, prevHeld, total float64
	for i, sm := range d.Samples {
		// Samples at or after the end are drawn, not integrated.
		var dt time.Duration
		if sm.At < s.Duration {
			dt = SampleInterval
			if i+1 < len(d.Samples) {
				dt = min(d.Samples[i+1].At, s.Duration) - sm.At
			}
		}
		sec := dt.Seconds()

		// The previous division: the laggard enforces the share of Laggard
		// ago, the other pods the share of now.
		now, lag := share(sm), share(sm)
		if d.LaggardDelay > 0 {
			lag = share(at(d.Samples, sm.At-d.LaggardDelay))
		}
		ready, running := sm.Pods.Ready, sm.Pods.Started-sm.Pods.Terminating
		prevReady, prevRunning := ready*now, running*now
		if sm.LaggardRunning {
			prevRunning += lag - now
		}
		if sm.LaggardReady {
			prevReady += lag - now
		}
		if len(tl) == len(d.Samples) {
			tl[i].PreviousPermits, tl[i].PreviousReadyPermits = prevRunning, prevReady
		}
		if dt == 0 {
			continue
		}
		r.PreviousPeakPermits = max(r.PreviousPeakPermits, prevRunning)
		if prevRunning > d.Downstream.Contract {
			r.PreviousOverContractSeconds += sec
		}

		h := float64(min(sm.ReadyPermits, usable)) * sec
		ph := float64(min(prevReady, usable)) * sec
		u := float64(usable) * sec
		held += h
		prevHeld += ph
		total += u
		for j := range r.Steps {
			st := &r.Steps[j]
			if sm.At.Seconds() >= st.From && sm.At.Seconds() < st.To {
				st.Lost += u - h
				st.PreviousLost += u - ph
			}
		}
	}
	r.Seconds = total / float64(usable)
	r.LostPermitSeconds, r.PreviousLostPermitSeconds = total-held, total-prevHeld
	if total > 0 {
		r.HeldFraction, r.PreviousHeldFraction = held/total, prevHeld/total
	}
	return r
}
