package storm

import (
	"fmt"
	"strings"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

// Goal is one thing a run must show, and whether it did.
type Goal struct {
	Variant string `json:"variant"`
	Goal    string `json:"goal"`
	Want    string `json:"want"`
	Got     string `json:"got"`
	Met     bool   `json:"met"`
	// Asserted is false for figures that are reported, not required.
	Asserted bool `json:"asserted"`
}

// The goals' thresholds.
const (
	// GoodputGoalFraction is the part of the goodput ceiling (usable permits
	// / typical latency) the operator must reach in the steady phases.
	GoodputGoalFraction = 0.95
	// HeldGoalFraction is the part of usable × duration the operator's
	// Ready pods must hold, integrated over its run.
	HeldGoalFraction = 0.97
	// ReloadP99Goal bounds the operator's reload latency p99, in seconds.
	ReloadP99Goal = 1.0
	// LoadGoalFraction is the part of the target load the harness should
	// achieve for the figures to mean what they say.
	LoadGoalFraction = 0.95
)

// EvaluateGoals checks the goals of the variants present in r.
func EvaluateGoals(r *Report) []Goal {
	var gs []Goal
	add := func(v, goal, want, got string, met, asserted bool) {
		gs = append(gs, Goal{Variant: v, Goal: goal, Want: want, Got: got, Met: met, Asserted: asserted})
	}
	for _, name := range r.Order {
		v := r.Variants[name]
		switch name {
		case "laggard":
			add(name, "peak in-flight within the contract while one pod applies every plan late", fmt.Sprintf("≤ %d", r.Contract),
				fmt.Sprint(v.PeakInFlight), v.PeakInFlight <= int64(r.Contract), true)
			add(name, "downstream 429s", "reported", fmt.Sprint(v.Downstream429), true, false)
			if c := v.Capacity; c != nil {
				add(name, "the previous division on the same schedule: peak permits of the running pods", "reported",
					fmt.Sprintf("%d (contract %d; above it for %.1fs)", c.PreviousPeakPermits, r.Contract, c.PreviousOverContractSeconds), true, false)
				add(name, "permits held by Ready pods, integrated", "reported",
					fmt.Sprintf("%.1f%% (previous division %.1f%%)", 100*c.HeldFraction, 100*c.PreviousHeldFraction), true, false)
			}
			rolloutGoal(add, name, v)
			permitsCheckGoal(add, name, v)
		case "operator":
			add(name, "no downstream 429s", "0", fmt.Sprint(v.Downstream429), v.Downstream429 == 0, true)
			var peaks []string
			for _, p := range v.Phases {
				peaks = append(peaks, fmt.Sprintf("%s: %d", p.Name, p.PeakInFlight))
			}
			add(name, "peak in-flight within the contract through every scale step",
				fmt.Sprintf("≤ %d", r.Contract), fmt.Sprintf("%d (%s)", v.PeakInFlight, strings.Join(peaks, "; ")),
				v.PeakInFlight <= int64(r.Contract), true)
			want := GoodputGoalFraction * r.GoodputCeilingPerSecond
			for _, p := range v.Phases {
				if !p.Steady {
					continue
				}
				got := fmt.Sprintf("%.1f/s over %.1fs", p.GoodputPerSecond, p.MeasuredSeconds)
				if p.MeasuredSeconds == 0 {
					got = "not measured: the phase is shorter than its settle time"
				}
				add(name, "goodput in phase "+p.Name,
					fmt.Sprintf("≥ %.1f/s (%.0f%% of %.1f/s)", want, 100*GoodputGoalFraction, r.GoodputCeilingPerSecond),
					got, p.MeasuredSeconds > 0 && p.GoodputPerSecond >= want, true)
			}
			// Every scale step while pods run is a new plan for each of them:
			// at least as many reloads as pods at the start.
			initial := initialReplicas(v)
			rl := v.ReloadLatencySeconds
			switch {
			case rl == nil || rl.Count == 0:
				add(name, "reload latency p99", fmt.Sprintf("< %gs", ReloadP99Goal), "no reload observed", false, true)
			default:
				add(name, "reload latency p99", fmt.Sprintf("< %gs over ≥ %d reloads", ReloadP99Goal, initial),
					fmt.Sprintf("%.3fs (p50 %.3fs, %d reloads)", rl.P99, rl.P50, rl.Count), rl.P99 < ReloadP99Goal && rl.Count >= int(initial), true)
			}
			if static, err := StaticPlan(initial); err == nil && len(v.Timeline) > 0 {
				// At the start the exact division is the same for every pod:
				// the share the static variant freezes.
				want := static.Permits * int(initial)
				add(name, "the Ready pods' permits at the start: the static share × the pods", fmt.Sprint(want),
					fmt.Sprint(v.Timeline[0].ReadyPermits), v.Timeline[0].ReadyPermits == want, true)
			}
			rolloutGoal(add, name, v)
			permitsCheckGoal(add, name, v)
			hpaGoal(add, name, v, true)
			if c := v.Capacity; c != nil {
				add(name, "permits held by Ready pods, integrated over the run",
					fmt.Sprintf("≥ %.0f%% of %d × %.1fs", 100*HeldGoalFraction, c.Usable, c.Seconds),
					fmt.Sprintf("%.1f%% (%.1f permit-seconds lost; previous division %.1f%%, %.1f lost)",
						100*c.HeldFraction, c.LostPermitSeconds, 100*c.PreviousHeldFraction, c.PreviousLostPermitSeconds),
					c.HeldFraction >= HeldGoalFraction, true)
			}
		case "naive":
			add(name, "the storm happens", "> 0 downstream 429s",
				fmt.Sprintf("%d (%.1f%%)", v.Downstream429, 100*v.Downstream429Fraction), v.Downstream429 > 0, true)
			amplificationGoals(add, name, v)
		case "static":
			initial := initialReplicas(v)
			var past int64
			for _, p := range v.Timeline {
				if p.Desired > initial {
					past += p.Rejected429
				}
			}
			// 16 pods × the 8-pod share hold more than the contract: the
			// frozen plan must show the storm the operator prevents.
			add(name, fmt.Sprintf("429s while scaled past the %d pods its plan assumed", initial), "> 0", fmt.Sprint(past), past > 0, true)
			hpaGoal(add, name, v, false)
		}
		add(name, "the harness kept up with the load",
			fmt.Sprintf("≥ %.0f%% of %.0f/s", 100*LoadGoalFraction, v.Load.TargetPerSecond),
			fmt.Sprintf("%.0f/s, %d dropped", v.Load.AchievedPerSecond, v.Load.Dropped),
			v.Load.AchievedPerSecond >= LoadGoalFraction*v.Load.TargetPerSecond, false)
	}
	return gs
}

// hpaGoal adds, for a run whose HPA scaled on the pods' demand, the goal
// that the real HPA scaled the workload up when the downstream slowed and
// back down after it recovered: the scale steps the other goals are about.
// It is asserted for the operator's run, whose steady phases need both.
func hpaGoal(add func(v, goal, want, got string, met, asserted bool), name string, v *VariantReport, asserted bool) {
	if v.HPAMetric != cluster.DemandMetric || len(v.Timeline) == 0 {
		return
	}
	initial, peak, final := v.Timeline[0].Desired, v.Timeline[0].Desired, v.Timeline[len(v.Timeline)-1].Desired
	var peakAt float64
	for _, p := range v.Timeline {
		if p.Desired > peak {
			peak, peakAt = p.Desired, p.At
		}
	}
	add(name, "the HPA scaled up when the downstream slowed, and back down after it recovered",
		fmt.Sprintf("%d → more → fewer", initial),
		fmt.Sprintf("%d → %d (at %.1fs) → %d", initial, peak, peakAt, final),
		peak > initial && final < peak, asserted)
}

// initialReplicas returns the replica count a run started with.
func initialReplicas(v *VariantReport) int32 {
	if len(v.Timeline) == 0 {
		return 0
	}
	return v.Timeline[0].Desired
}

// amplificationGoals compares, phase by phase, the retry amplification of a
// run whose retries no budget limits with the sizing model's (see
// PhaseAmplification). The rejected fraction of attempts is asserted. The
// attempts per request are asserted where the measurement is exact, the
// gates having shed at most 1 % of the requests (a retry shed locally cannot
// be told from a first attempt shed), and reported elsewhere.
func amplificationGoals(add func(v, goal, want, got string, met, asserted bool), name string, v *VariantReport) {
	if len(v.RetryAmplification) == 0 {
		add(name, "retry amplification measured against the sizing model", "every phase", "not measured", false, true)
		return
	}
	for _, a := range v.RetryAmplification {
		add(name, "rejected fraction of attempts in phase "+a.Phase,
			fmt.Sprintf("within %.0f pp of the model's %.1f%% (%s)", 100*AmplificationTolerance, 100*a.FixedPointRejection, a.Command()),
			fmt.Sprintf("%.1f%% (%d of %d attempts)", 100*a.MeasuredRejection, a.Rejected, a.Attempts), a.RejectionAgrees(), true)
		add(name, "attempts per request in phase "+a.Phase,
			fmt.Sprintf("within %.0f pp of the model's %.1f%% (single round %.1f%%)", 100*AmplificationTolerance, 100*a.FixedPoint, 100*a.SingleRound),
			fmt.Sprintf("%.1f%% (%d attempts, %d requests, %d shed)", 100*a.Measured, a.Attempts, a.Requests, a.Shed), a.Agrees(), a.Exact())
	}
}

// permitsCheckGoal adds the goal that the pods' gates export the permits
// their logs said, which the capacity figures count from.
func permitsCheckGoal(add func(v, goal, want, got string, met, asserted bool), name string, v *VariantReport) {
	c := v.PermitsCheck
	if c == nil {
		return
	}
	got := fmt.Sprintf("%d of %d pods agree", c.Agree, c.Pods)
	if len(c.Disagreements) > 0 {
		got += ": " + strings.Join(c.Disagreements, "; ")
	}
	add(name, "the pods' backpressure_gate_permits metric equals their logged permits", "every running pod", got,
		c.Pods > 0 && c.Agree == c.Pods, true)
}

// rolloutGoal adds the goal that every running pod acknowledged the last
// plan's <epoch>/<revision>.
func rolloutGoal(add func(v, goal, want, got string, met, asserted bool), name string, v *VariantReport) {
	ro := v.Rollout
	if ro == nil {
		return
	}
	final := int32(0)
	if n := len(v.Timeline); n > 0 {
		final = v.Timeline[n-1].Desired
	}
	add(name, "every running pod acknowledged the last plan", fmt.Sprintf("acknowledged = total = %d, 0 stale pods, at %s", final, ro.Last),
		fmt.Sprintf("%d/%d acknowledged, %d stale, status current: %t", ro.Acknowledged, ro.Total, ro.StalePods, ro.Current),
		ro.Current && ro.Acknowledged == ro.Total && ro.Total == final && ro.StalePods == 0, true)
}

// Failed returns the asserted goals that were not met.
func (r *Report) Failed() []Goal {
	var out []Goal
	for _, g := range r.Goals {
		if g.Asserted && !g.Met {
			out = append(out, g)
		}
	}
	return out
}
