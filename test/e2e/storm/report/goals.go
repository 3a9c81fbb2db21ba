package report

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

// LoadGoalFraction is the part of the target load the harness should
// achieve for the figures to mean what they say.
const LoadGoalFraction = 0.95

// Goals are a run's goals in the order its scenario judges them. The
// methods besides Add add the goals several scenarios share.
type Goals []Goal

// Add adds a goal of variant.
func (gs *Goals) Add(variant, goal, want, got string, met, asserted bool) {
	*gs = append(*gs, Goal{Variant: variant, Goal: goal, Want: want, Got: got, Met: met, Asserted: asserted})
}

// Load adds the figure (reported, not asserted) that the harness kept up
// with the load it was to send.
func (gs *Goals) Load(name string, v *VariantReport) {
	gs.Add(name, "the harness kept up with the load",
		fmt.Sprintf("≥ %.0f%% of %.0f/s", 100*LoadGoalFraction, v.Load.TargetPerSecond),
		fmt.Sprintf("%.0f/s, %d dropped", v.Load.AchievedPerSecond, v.Load.Dropped),
		v.Load.AchievedPerSecond >= LoadGoalFraction*v.Load.TargetPerSecond, false)
}

// HPA adds, for a run whose HPA scaled on the pods' demand, the goal
// that the real HPA scaled the workload up when the downstream slowed and
// back down after it recovered: the scale steps the other goals are about.
// It is asserted for the operator's run, whose steady phases need both.
func (gs *Goals) HPA(name string, v *VariantReport, asserted bool) {
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
	gs.Add(name, "the HPA scaled up when the downstream slowed, and back down after it recovered",
		fmt.Sprintf("%d → more → fewer", initial),
		fmt.Sprintf("%d → %d (at %.1fs) → %d", initial, peak, peakAt, final),
		peak > initial && final < peak, asserted)
}

// InitialReplicas returns the replica count a run started with.
func InitialReplicas(v *VariantReport) int32 {
	if len(v.Timeline) == 0 {
		return 0
	}
	return v.Timeline[0].Desired
}

// Amplification compares, phase by phase, the retry amplification of a
// run whose retries no budget limits with the sizing model's (see
// PhaseAmplification). The rejected fraction of attempts is asserted. The
// attempts per request are asserted where the measurement is exact, the
// gates having shed at most 1 % of the requests (a retry shed locally cannot
// be told from a first attempt shed), and reported elsewhere.
func (gs *Goals) Amplification(name string, v *VariantReport) {
	if len(v.RetryAmplification) == 0 {
		gs.Add(name, "retry amplification measured against the sizing model", "every phase", "not measured", false, true)
		return
	}
	for _, a := range v.RetryAmplification {
		gs.Add(name, "rejected fraction of attempts in phase "+a.Phase,
			fmt.Sprintf("within %.0f pp of the model's %.1f%% (%s)", 100*AmplificationTolerance, 100*a.FixedPointRejection, a.Command()),
			fmt.Sprintf("%.1f%% (%d of %d attempts)", 100*a.MeasuredRejection, a.Rejected, a.Attempts), a.RejectionAgrees(), true)
		gs.Add(name, "attempts per request in phase "+a.Phase,
			fmt.Sprintf("within %.0f pp of the model's %.1f%% (single round %.1f%%)", 100*AmplificationTolerance, 100*a.FixedPoint, 100*a.SingleRound),
			fmt.Sprintf("%.1f%% (%d attempts, %d requests, %d shed)", 100*a.Measured, a.Attempts, a.Requests, a.Shed), a.Agrees(), a.Exact())
	}
}

// PermitsCheck adds the goal that the pods' gates export the permits
// their logs said, which the capacity figures count from.
func (gs *Goals) PermitsCheck(name string, v *VariantReport) {
	c := v.PermitsCheck
	if c == nil {
		return
	}
	got := fmt.Sprintf("%d of %d pods agree", c.Agree, c.Pods)
	if len(c.Disagreements) > 0 {
		got += ": " + strings.Join(c.Disagreements, "; ")
	}
	gs.Add(name, "the pods' backpressure_gate_permits metric equals their logged permits", "every running pod", got,
		c.Pods > 0 && c.Agree == c.Pods, true)
}

// Rollout adds the goal that every running pod acknowledged the last
// plan's <epoch>/<revision>.
func (gs *Goals) Rollout(name string, v *VariantReport) {
	ro := v.Rollout
	if ro == nil {
		return
	}
	final := int32(0)
	if n := len(v.Timeline); n > 0 {
		final = v.Timeline[n-1].Desired
	}
	gs.Add(name, "every running pod acknowledged the last plan", fmt.Sprintf("acknowledged = total = %d, 0 stale pods, at %s", final, ro.Last),
		fmt.Sprintf("%d/%d acknowledged, %d stale, status current: %t", ro.Acknowledged, ro.Total, ro.StalePods, ro.Current),
		ro.Current && ro.Acknowledged == ro.Total && ro.Total == final && ro.StalePods == 0, true)
}

// Failed returns the asserted goals that were not met.
func (gs Goals) Failed() []Goal {
	var out []Goal
	for _, g := range gs {
		if g.Asserted && !g.Met {
			out = append(out, g)
		}
	}
	return out
}

// Failed returns the asserted goals that were not met.
func (r *Report) Failed() []Goal { return Goals(r.Goals).Failed() }
