package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// CallerSample is one caller's side of a CallersSample.
type CallerSample struct {
	Pods cluster.PodCounts
	// HPA is the caller's HPA's status.
	HPA cluster.HPAStatus
	// ReadyPermits is the sum of the permits the caller's Ready pods'
	// gates enforce; Permits the same over all its running pods.
	ReadyPermits, Permits int
	// LaggardRunning and LaggardReady say whether the caller's laggard pod
	// runs (not terminating) and is in the endpoints, and LaggardPermits
	// what its gate enforces; all zero without a laggard.
	LaggardRunning, LaggardReady bool
	LaggardPermits               int
}

// CallersSample is a run of one or more callers of one downstream at one
// moment.
type CallersSample struct {
	At         time.Duration
	Downstream traffic.DownstreamCounts
	// Latency is the downstream's latency.
	Latency time.Duration
	// Callers are in the scenario's order.
	Callers []CallerSample
	// Parts are the contract's status.callers[].permits by namespace/quota,
	// when the callers share a DownstreamContract.
	Parts map[string]int32
}

// Of returns the moment as a variant's run of caller i alone records it.
func (s CallersSample) Of(i int) Sample {
	c := s.Callers[i]
	return Sample{At: s.At, Downstream: s.Downstream, Latency: s.Latency, Pods: c.Pods, HPA: c.HPA, Permits: c.Permits,
		ReadyPermits: c.ReadyPermits, LaggardRunning: c.LaggardRunning, LaggardReady: c.LaggardReady, LaggardPermits: c.LaggardPermits}
}

// CallersData is everything a scenario of callers sharing one contract
// recorded.
type CallersData struct {
	// Downstream is the downstream the callers share.
	Downstream Downstream
	// Duration is how long the load ran.
	Duration time.Duration
	// Callers and Checkpoints are the scenario's.
	Callers     []Caller
	Checkpoints []CallersCheckpoint
	Samples     []CallersSample
	Final       traffic.DownstreamCounts
	// Loads, Rollouts and PermitsChecks are per caller, in the scenario's
	// order.
	Loads         []*traffic.LoadResult
	Rollouts      []*RolloutReport
	PermitsChecks []*observe.PermitsCheck
	// Status is the contract's last status.
	Status *v1alpha1.DownstreamContractStatus
}

// Caller is one workload of a scenario of callers sharing one contract, as
// its report needs it.
type Caller struct {
	// Name is the workload's; Namespace and Quota name its DownstreamQuota.
	Name, Namespace, Quota string
	// Weight and DemandInFlight are the quota's spec.weight and
	// spec.demand.inFlight (0: no demand stated).
	Weight, DemandInFlight int32
	// Part is the permits the caller must get, once every caller has Ready
	// pods: its part of the usable permits.
	Part int64
	// InitialReplicas run before the load starts; Scale are the caller's
	// autoscaler's steps.
	InitialReplicas int32
	Scale           []schedule.ScaleStep
}

// key is the caller's name in the contract's split: namespace/quota.
func (c Caller) key() string { return c.Namespace + "/" + c.Quota }

// replicasAt returns the replicas the caller's autoscaler has been asked
// for at t.
func (c Caller) replicasAt(t time.Duration) int32 {
	return schedule.Schedule{InitialReplicas: c.InitialReplicas, Scale: c.Scale}.ReplicasAt(t)
}

// CallersCheckpoint is a moment at which each caller's Ready pods must hold
// its part.
type CallersCheckpoint struct {
	// At is the moment. With Within zero it must come well after every scale
	// step before it, and the last sample at or before it is the
	// checkpoint.
	At time.Duration
	// Within, when positive, makes the checkpoint a poll: it is met at the
	// first sample from At to At+Within at which each caller has as many
	// Ready pods as its last step before At asked for, they hold its part
	// and the contract's status gives it that part; when no sample does,
	// the last one of the window is the checkpoint, and it fails. At must
	// then come after the HPA's decision on every step before it (one
	// cluster.HPASyncPeriod after the step), so that the old pods cannot
	// meet it.
	Within time.Duration
}

// End is the last moment the checkpoint looks at.
func (cp CallersCheckpoint) End() time.Duration { return cp.At + cp.Within }

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
	// FairPart is the caller's part of the usable permits by weighted
	// max-min fairness over the callers' weights and demands: what it must
	// get (Caller.Part).
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

// AnalyzeCallers turns the scenario's data into its report; its scenario
// judges the goals.
func AnalyzeCallers(d *CallersData) *CallersReport {
	r := &CallersReport{Contract: d.Downstream.Contract, Usable: d.Downstream.Usable(), DurationSeconds: d.Duration.Seconds(),
		Downstream429: d.Final.Rejected, PeakInFlight: d.Final.Peak}
	if sec := d.Duration.Seconds(); sec > 0 {
		r.GoodputPerSecond = float64(d.Final.OK) / sec
	}
	parts := map[string]int32{}
	if d.Status != nil {
		for _, c := range d.Status.Callers {
			parts[c.Namespace+"/"+c.Quota] = c.Permits
		}
	}
	for i, c := range d.Callers {
		cr := CallerReport{Name: c.Name, Namespace: c.Namespace, Weight: c.Weight, DemandInFlight: c.DemandInFlight,
			FairPart: c.Part, StatusPart: parts[c.key()], Scale: c.Scale}
		if i < len(d.Rollouts) {
			cr.Rollout = d.Rollouts[i]
		}
		if i < len(d.PermitsChecks) {
			cr.PermitsCheck = d.PermitsChecks[i]
		}
		if i < len(d.Loads) && d.Loads[i] != nil {
			cr.LoadAchievedPerSecond, cr.LoadTargetPerSecond = d.Loads[i].AchievedPerSecond(), d.Loads[i].Target
		}
		for _, t := range d.Checkpoints {
			if cp, ok := callerCheckpoint(d.Samples, t, i, c); ok {
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
	return r
}

// callerCheckpoint returns caller i (c) at checkpoint t: the last sample at
// or before t.At, or for a polling checkpoint the first sample of its window
// that meets it, or else the window's last. ok is false when no sample
// covers the checkpoint.
func callerCheckpoint(samples []CallersSample, t CallersCheckpoint, i int, c Caller) (cp CallerCheckpoint, ok bool) {
	at := func(sm CallersSample) CallerCheckpoint {
		part, named := sm.Parts[c.key()]
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
		if cp.Met(c.Part) {
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

// Failed returns the asserted goals that were not met.
func (r *CallersReport) Failed() []Goal { return Goals(r.Goals).Failed() }

// WriteJSON writes the report to path, creating its directory.
func (r *CallersReport) WriteJSON(path string) error { return WriteJSON(path, r) }

// WriteCallersTable writes the report for a terminal.
func WriteCallersTable(w io.Writer, r *CallersReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Two callers share one DownstreamContract: %d in flight, %d usable permits. Over %.0fs: %d downstream 429s, peak in-flight %d, goodput %.1f/s.\n\n",
		r.Contract, r.Usable, r.DurationSeconds, r.Downstream429, r.PeakInFlight, r.GoodputPerSecond)
	fmt.Fprintln(tw, "caller\tweight\tdemand in flight\tfair part\tstatus part\tReady pods' permits at the checkpoints\tload/s (target)")
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
