package storm

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// CallerSample is one caller's side of a CallersSample.
type CallerSample struct {
	Pods cluster.PodCounts
	// ReadyPermits is the sum of the permits the caller's Ready pods'
	// gates enforce; Permits the same over all its running pods.
	ReadyPermits, Permits int
}

// CallersSample is the two-callers scenario at one moment.
type CallersSample struct {
	At         time.Duration
	Downstream traffic.DownstreamCounts
	// Callers are in the scenario's order.
	Callers []CallerSample
	// Parts are the contract's status.callers[].permits by namespace/quota.
	Parts map[string]int32
}

// CallersData is everything the two-callers scenario recorded.
type CallersData struct {
	Scenario CallersScenario
	Samples  []CallersSample
	Final    traffic.DownstreamCounts
	// Loads and Rollouts are per caller, in the scenario's order.
	Loads         []*traffic.LoadResult
	Rollouts      []*RolloutReport
	PermitsChecks []*observe.PermitsCheck
	// Status is the contract's last status.
	Status *v1alpha1.DownstreamContractStatus
}

// CallersReport is the outcome of the two-callers scenario. Its JSON form is
// report-two-callers.json.
type CallersReport struct {
	Contract        int     `json:"contract"`
	Usable          int     `json:"usable"`
	DurationSeconds float64 `json:"durationSeconds"`
	// Downstream429 and PeakInFlight are the shared downstream's.
	Downstream429    int64   `json:"downstream429"`
	PeakInFlight     int64   `json:"peakInFlight"`
	GoodputPerSecond float64 `json:"goodputPerSecond"`
	// Callers are in the scenario's order.
	Callers []CallerReport `json:"callers"`
	// Timeline has the 100 ms samples.
	Timeline []CallersPoint `json:"timeline"`
	Goals    []Goal         `json:"goals"`
}

// CallerReport is one caller's figures.
type CallerReport struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Weight    int32  `json:"weight"`
	// DemandInFlight is 0 when the caller states none.
	DemandInFlight int32 `json:"demandInFlight"`
	// FairPart is division.FairShare over the usable permits with the
	// callers' weights and demands: what the caller must get.
	FairPart int64 `json:"fairPart"`
	// StatusPart is the contract's status.callers[].permits for it at the
	// end.
	StatusPart int32 `json:"statusPart"`
	// Checkpoints are the caller's Ready pods and their permits at each of
	// the scenario's checkpoints.
	Checkpoints []CallerCheckpoint `json:"checkpoints"`
	// Scale are the caller's autoscaler's steps.
	Scale []schedule.ScaleStep `json:"scale"`
	// Rollout is whether its pods acknowledged its last plan.
	Rollout *RolloutReport `json:"rollout"`
	// PermitsCheck compares its pods' logged permits with their metrics
	// at the end.
	PermitsCheck *observe.PermitsCheck `json:"permitsCheck,omitempty"`
	// Load is what the harness sent it.
	LoadAchievedPerSecond float64 `json:"loadAchievedPerSecond"`
	LoadTargetPerSecond   float64 `json:"loadTargetPerSecond"`
}

// CallerCheckpoint is a caller at a checkpoint.
type CallerCheckpoint struct {
	// At is the sample the checkpoint took: for a polling checkpoint, the
	// first one that met it, or the end of its window.
	At           float64 `json:"atSeconds"`
	ReadyPods    int     `json:"readyPods"`
	ReadyPermits int     `json:"readyPermits"`
	// StatusPart is the contract status's part for the caller then (-1
	// when the status did not name it).
	StatusPart int32 `json:"statusPart"`
	// From and Within are a polling checkpoint's window (see
	// CallersCheckpoint), and WantReadyPods the Ready pods it waits for;
	// all zero for a checkpoint taken at one moment.
	From          float64 `json:"fromSeconds,omitempty"`
	Within        float64 `json:"withinSeconds,omitempty"`
	WantReadyPods int     `json:"wantReadyPods,omitempty"`
}

// Met reports whether the caller's Ready pods held fair, and the contract's
// status gave it fair, at the checkpoint, on the Ready pods a polling
// checkpoint waits for.
func (cp CallerCheckpoint) Met(fair int64) bool {
	return int64(cp.ReadyPermits) == fair && int64(cp.StatusPart) == fair && (cp.WantReadyPods == 0 || cp.ReadyPods == cp.WantReadyPods)
}

// String is the checkpoint for a table: "7.5s: 16 on 4 pods", or for a
// polling one "from 24.0s: 16 on 3 pods at 25.3s (within 8s)".
func (cp CallerCheckpoint) String() string {
	if cp.Within == 0 {
		return fmt.Sprintf("%.1fs: %d on %d pods", cp.At, cp.ReadyPermits, cp.ReadyPods)
	}
	return fmt.Sprintf("from %.1fs: %d on %d pods at %.1fs (within %.0fs)", cp.From, cp.ReadyPermits, cp.ReadyPods, cp.At, cp.Within)
}

// CallersPoint is one 100 ms sample.
type CallersPoint struct {
	At       float64 `json:"t"`
	InFlight int64   `json:"inFlight"`
	// ReadyPermits and Ready are per caller.
	ReadyPermits []int `json:"readyPermits"`
	Ready        []int `json:"ready"`
	Rejected429  int64 `json:"rejected429"`
}

// callerKey is a caller's name in the contract's split: namespace/quota.
func callerKey(c CallerSpec) string { return c.Namespace + "/" + QuotaName }

// FairParts returns each caller's part of the usable permits by
// division.FairShare, the same function the operator splits with, on the
// callers' weights and demands (every caller having Ready pods).
func FairParts(cs CallersScenario) []int64 {
	claims := make([]division.Claim, len(cs.Callers))
	for i, c := range cs.Callers {
		claims[i] = division.Claim{Name: callerKey(c), Weight: int64(c.Weight), Demand: division.Unbounded}
		if c.DemandInFlight > 0 {
			claims[i].Demand = int64(c.DemandInFlight)
		}
	}
	return division.FairShare(int64(Usable()), claims)
}

// AnalyzeCallers turns the scenario's data into its report.
func AnalyzeCallers(d *CallersData) *CallersReport {
	cs := d.Scenario
	r := &CallersReport{Contract: Contract, Usable: Usable(), DurationSeconds: cs.Duration.Seconds(),
		Downstream429: d.Final.Rejected, PeakInFlight: d.Final.Peak}
	if sec := cs.Duration.Seconds(); sec > 0 {
		r.GoodputPerSecond = float64(d.Final.OK) / sec
	}
	fair := FairParts(cs)
	parts := map[string]int32{}
	if d.Status != nil {
		for _, c := range d.Status.Callers {
			parts[c.Namespace+"/"+c.Quota] = c.Permits
		}
	}
	for i, c := range cs.Callers {
		cr := CallerReport{Name: c.Name, Namespace: c.Namespace, Weight: c.Weight, DemandInFlight: c.DemandInFlight,
			FairPart: fair[i], StatusPart: parts[callerKey(c)], Scale: c.Scale}
		if i < len(d.Rollouts) {
			cr.Rollout = d.Rollouts[i]
		}
		if i < len(d.PermitsChecks) {
			cr.PermitsCheck = d.PermitsChecks[i]
		}
		if i < len(d.Loads) && d.Loads[i] != nil {
			cr.LoadAchievedPerSecond, cr.LoadTargetPerSecond = d.Loads[i].AchievedPerSecond(), d.Loads[i].Target
		}
		for _, t := range cs.Checkpoints {
			if cp, ok := callerCheckpoint(d.Samples, t, i, c, fair[i]); ok {
				cr.Checkpoints = append(cr.Checkpoints, cp)
			}
		}
		r.Callers = append(r.Callers, cr)
	}
	var prev traffic.DownstreamCounts
	for _, sm := range d.Samples {
		p := CallersPoint{At: sm.At.Seconds(), InFlight: sm.Downstream.WindowPeak, Rejected429: sm.Downstream.Rejected - prev.Rejected}
		for _, c := range sm.Callers {
			p.ReadyPermits = append(p.ReadyPermits, c.ReadyPermits)
			p.Ready = append(p.Ready, c.Pods.Ready)
		}
		prev = sm.Downstream
		r.Timeline = append(r.Timeline, p)
	}
	r.Goals = evaluateCallers(r)
	return r
}

// callerCheckpoint returns caller i (c) at checkpoint t: the last sample at
// or before t.At, or for a polling checkpoint the first sample of its window
// that meets it, or else the window's last. ok is false when no sample
// covers the checkpoint.
func callerCheckpoint(samples []CallersSample, t CallersCheckpoint, i int, c CallerSpec, fair int64) (cp CallerCheckpoint, ok bool) {
	at := func(sm CallersSample) CallerCheckpoint {
		part, named := sm.Parts[callerKey(c)]
		if !named {
			part = -1
		}
		return CallerCheckpoint{At: sm.At.Seconds(), ReadyPods: sm.Callers[i].Pods.Ready,
			ReadyPermits: sm.Callers[i].ReadyPermits, StatusPart: part}
	}
	if t.Within == 0 {
		sm, ok := callersAt(samples, t.At)
		if !ok || i >= len(sm.Callers) {
			return CallerCheckpoint{}, false
		}
		cp = at(sm)
		// The checkpoint's moment, as the scenario states it.
		cp.At = t.At.Seconds()
		return cp, true
	}
	for _, sm := range samples {
		if sm.At < t.At || sm.At > t.End() || i >= len(sm.Callers) {
			continue
		}
		cp, ok = at(sm), true
		cp.From, cp.Within, cp.WantReadyPods = t.At.Seconds(), t.Within.Seconds(), int(c.replicasAt(t.At))
		if cp.Met(fair) {
			return cp, true
		}
	}
	return cp, ok
}

// callersAt returns the last sample at or before t.
func callersAt(samples []CallersSample, t time.Duration) (CallersSample, bool) {
	var out CallersSample
	ok := false
	for _, s := range samples {
		if s.At > t {
			break
		}
		out, ok = s, true
	}
	return out, ok
}

func evaluateCallers(r *CallersReport) []Goal {
	const name = "two-callers"
	var gs []Goal
	add := func(goal, want, got string, met, asserted bool) {
		gs = append(gs, Goal{Variant: name, Goal: goal, Want: want, Got: got, Met: met, Asserted: asserted})
	}
	add("peak in-flight at the shared downstream within the contract", fmt.Sprintf("≤ %d", r.Contract),
		fmt.Sprint(r.PeakInFlight), r.PeakInFlight <= int64(r.Contract), true)
	add("downstream 429s", "0", fmt.Sprint(r.Downstream429), r.Downstream429 == 0, true)
	for _, c := range r.Callers {
		add(c.Name+"'s part in the contract's status", fmt.Sprintf("%d (division.FairShare)", c.FairPart),
			fmt.Sprint(c.StatusPart), int64(c.StatusPart) == c.FairPart, true)
		var got []string
		met := len(c.Checkpoints) > 0
		for _, cp := range c.Checkpoints {
			got = append(got, cp.String())
			met = met && cp.Met(c.FairPart)
		}
		add(c.Name+"'s Ready pods hold its fair part at every checkpoint", fmt.Sprintf("%d", c.FairPart), strings.Join(got, "; "), met, true)
		if ro := c.Rollout; ro != nil {
			add(c.Name+"'s running pods acknowledged its last plan", "acknowledged = total, 0 stale pods, at "+ro.Last,
				fmt.Sprintf("%d/%d acknowledged, %d stale, status current: %t", ro.Acknowledged, ro.Total, ro.StalePods, ro.Current),
				ro.Current && ro.Acknowledged == ro.Total && ro.StalePods == 0, true)
		}
		if pc := c.PermitsCheck; pc != nil {
			got := fmt.Sprintf("%d of %d pods agree", pc.Agree, pc.Pods)
			if len(pc.Disagreements) > 0 {
				got += ": " + strings.Join(pc.Disagreements, "; ")
			}
			add(c.Name+"'s pods' backpressure_gate_permits metric equals their logged permits", "every running pod", got,
				pc.Pods > 0 && pc.Agree == pc.Pods, true)
		}
		add(c.Name+": the harness kept up with the load", fmt.Sprintf("≥ %.0f%% of %.0f/s", 100*LoadGoalFraction, c.LoadTargetPerSecond),
			fmt.Sprintf("%.0f/s", c.LoadAchievedPerSecond), c.LoadAchievedPerSecond >= LoadGoalFraction*c.LoadTargetPerSecond, false)
	}
	return gs
}

// Failed returns the asserted goals that were not met.
func (r *CallersReport) Failed() []Goal {
	var out []Goal
	for _, g := range r.Goals {
		if g.Asserted && !g.Met {
			out = append(out, g)
		}
	}
	return out
}

// WriteJSON writes the report to path, creating its directory.
func (r *CallersReport) WriteJSON(path string) error { return writeJSON(path, r) }

// WriteCallersTable writes the report for a terminal.
func WriteCallersTable(w io.Writer, r *CallersReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Two callers share one DownstreamContract: %d in flight, %d usable permits. Over %.0fs: %d downstream 429s, peak in-flight %d, goodput %.1f/s.\n\n",
		r.Contract, r.Usable, r.DurationSeconds, r.Downstream429, r.PeakInFlight, r.GoodputPerSecond)
	fmt.Fprintln(tw, "caller\tweight\tdemand in flight\tfair part (FairShare)\tstatus part\tReady pods' permits at the checkpoints\tload/s (target)")
	for _, c := range r.Callers {
		demand := "none"
		if c.DemandInFlight > 0 {
			demand = fmt.Sprint(c.DemandInFlight)
		}
		var cps []string
		for _, cp := range c.Checkpoints {
			cps = append(cps, cp.String())
		}
		fmt.Fprintf(tw, "%s (%s)\t%d\t%s\t%d\t%d\t%s\t%.0f (%.0f)\n", c.Name, c.Namespace, c.Weight, demand, c.FairPart, c.StatusPart,
			strings.Join(cps, ", "), c.LoadAchievedPerSecond, c.LoadTargetPerSecond)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "goal\tvariant\twant\tgot\tresult")
	for _, g := range r.Goals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Goal, g.Variant, g.Want, g.Got, goalResult(g))
	}
	return tw.Flush()
}
