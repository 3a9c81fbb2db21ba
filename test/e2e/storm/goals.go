package storm

import (
	"fmt"
	"strings"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// The operator's goals' thresholds.
const (
	// GoodputGoalFraction is the part of the goodput ceiling (usable permits
	// / typical latency) the operator must reach in the steady phases.
	GoodputGoalFraction = 0.95
	// HeldGoalFraction is the part of usable × duration the operator's
	// Ready pods must hold, integrated over its run.
	HeldGoalFraction = 0.97
	// ReloadP99Goal bounds the operator's reload latency p99, in seconds.
	ReloadP99Goal = 1.0
)

// judge sets the goals of v's run in rep: the variant's own, then the
// figure of the load that every run reports.
func judge(v Variant, rep *report.VariantReport) {
	var gs report.Goals
	if v.Goals != nil {
		gs = v.Goals(rep)
	}
	gs.Load(rep.Name, rep)
	rep.Goals = gs
}

// operatorGoals are the goals of the operator on the common schedule: no
// storm, the goodput ceiling in the steady phases, fast reloads, every
// usable permit with the Ready pods, and the HPA's scale steps that make
// those goals mean something.
func operatorGoals(v *report.VariantReport) report.Goals {
	var gs report.Goals
	name := v.Name
	gs.Add(name, "no downstream 429s", "0", fmt.Sprint(v.Downstream429), v.Downstream429 == 0, true)
	var peaks []string
	for _, p := range v.Phases {
		peaks = append(peaks, fmt.Sprintf("%s: %d", p.Name, p.PeakInFlight))
	}
	gs.Add(name, "peak in-flight within the contract through every scale step",
		fmt.Sprintf("≤ %d", Contract), fmt.Sprintf("%d (%s)", v.PeakInFlight, strings.Join(peaks, "; ")),
		v.PeakInFlight <= Contract, true)
	want := GoodputGoalFraction * GoodputCeiling()
	for _, p := range v.Phases {
		if !p.Steady {
			continue
		}
		got := fmt.Sprintf("%.1f/s over %.1fs", p.GoodputPerSecond, p.MeasuredSeconds)
		if p.MeasuredSeconds == 0 {
			got = "not measured: the phase is shorter than its settle time"
		}
		gs.Add(name, "goodput in phase "+p.Name,
			fmt.Sprintf("≥ %.1f/s (%.0f%% of %.1f/s)", want, 100*GoodputGoalFraction, GoodputCeiling()),
			got, p.MeasuredSeconds > 0 && p.GoodputPerSecond >= want, true)
	}
	// Every scale step while pods run is a new plan for each of them: at
	// least as many reloads as pods at the start.
	initial := report.InitialReplicas(v)
	switch rl := v.ReloadLatencySeconds; {
	case rl == nil || rl.Count == 0:
		gs.Add(name, "reload latency p99", fmt.Sprintf("< %gs", ReloadP99Goal), "no reload observed", false, true)
	default:
		gs.Add(name, "reload latency p99", fmt.Sprintf("< %gs over ≥ %d reloads", ReloadP99Goal, initial),
			fmt.Sprintf("%.3fs (p50 %.3fs, %d reloads)", rl.P99, rl.P50, rl.Count), rl.P99 < ReloadP99Goal && rl.Count >= int(initial), true)
	}
	if static, err := StaticPlan(initial); err == nil && len(v.Timeline) > 0 {
		// At the start the exact division is the same for every pod: the
		// share the static variant freezes.
		want := static.Permits * int(initial)
		gs.Add(name, "the Ready pods' permits at the start: the static share × the pods", fmt.Sprint(want),
			fmt.Sprint(v.Timeline[0].ReadyPermits), v.Timeline[0].ReadyPermits == want, true)
	}
	gs.Rollout(name, v)
	gs.PermitsCheck(name, v)
	gs.HPA(name, v, true)
	if c := v.Capacity; c != nil {
		gs.Add(name, "permits held by Ready pods, integrated over the run",
			fmt.Sprintf("≥ %.0f%% of %d × %.1fs", 100*HeldGoalFraction, c.Usable, c.Seconds),
			fmt.Sprintf("%.1f%% (%.1f permit-seconds lost; previous division %.1f%%, %.1f lost)",
				100*c.HeldFraction, c.LostPermitSeconds, 100*c.PreviousHeldFraction, c.PreviousLostPermitSeconds),
			c.HeldFraction >= HeldGoalFraction, true)
	}
	return gs
}

// staticGoals are the goals of the static share: the storm once the HPA
// scales past the pods its plan assumed.
func staticGoals(v *report.VariantReport) report.Goals {
	var gs report.Goals
	initial := report.InitialReplicas(v)
	var past int64
	for _, p := range v.Timeline {
		if p.Desired > initial {
			past += p.Rejected429
		}
	}
	// 16 pods × the 8-pod share hold more than the contract: the frozen
	// plan must show the storm the operator prevents.
	gs.Add(v.Name, fmt.Sprintf("429s while scaled past the %d pods its plan assumed", initial), "> 0", fmt.Sprint(past), past > 0, true)
	gs.HPA(v.Name, v, false)
	return gs
}

// naiveGoals are the goals of the naive full contract per pod: the storm,
// and the retries amplifying it as the sizing model says.
func naiveGoals(v *report.VariantReport) report.Goals {
	var gs report.Goals
	gs.Add(v.Name, "the storm happens", "> 0 downstream 429s",
		fmt.Sprintf("%d (%.1f%%)", v.Downstream429, 100*v.Downstream429Fraction), v.Downstream429 > 0, true)
	gs.Amplification(v.Name, v)
	return gs
}

// laggardGoals are the goals of the laggard scenario: the contract kept
// while one pod applies every plan late, and the previous division's
// figures on the same pod timeline for comparison.
func laggardGoals(v *report.VariantReport) report.Goals {
	var gs report.Goals
	name := v.Name
	gs.Add(name, "peak in-flight within the contract while one pod applies every plan late", fmt.Sprintf("≤ %d", Contract),
		fmt.Sprint(v.PeakInFlight), v.PeakInFlight <= Contract, true)
	gs.Add(name, "downstream 429s", "reported", fmt.Sprint(v.Downstream429), true, false)
	if c := v.Capacity; c != nil {
		gs.Add(name, "the previous division on the same schedule: peak permits of the running pods", "reported",
			fmt.Sprintf("%d (contract %d; above it for %.1fs)", c.PreviousPeakPermits, Contract, c.PreviousOverContractSeconds), true, false)
		gs.Add(name, "permits held by Ready pods, integrated", "reported",
			fmt.Sprintf("%.1f%% (previous division %.1f%%)", 100*c.HeldFraction, 100*c.PreviousHeldFraction), true, false)
	}
	gs.Rollout(name, v)
	gs.PermitsCheck(name, v)
	return gs
}
