package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/backpressure-dev/backpressure-operator/internal/quotaplan"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// The JSON contract of plan. Scripts depend on these names: durations are
// seconds in fields ending in Seconds, rates are calls per second.

type perPodJSON struct {
	Permits               int     `json:"permits"`
	QueueCapacity         int     `json:"queueCapacity"`
	Workers               int     `json:"workers"`
	RatePerSecond         float64 `json:"ratePerSecond"`
	Burst                 int     `json:"burst"`
	CapacityPerSecond     float64 `json:"capacityPerSecond"`
	MaxQueueWaitSeconds   float64 `json:"maxQueueWaitSeconds"`
	AcquireTimeoutSeconds float64 `json:"acquireTimeoutSeconds"`
	RetryBudgetPerSecond  float64 `json:"retryBudgetPerSecond"`
}

type demandJSON struct {
	InFlight          float64  `json:"inFlight"`
	WorstInFlight     *float64 `json:"worstInFlight"`
	Available         int      `json:"available"`
	GoodputCeiling    float64  `json:"goodputCeiling"`
	ShedFraction      float64  `json:"shedFraction"`
	WorstShedFraction *float64 `json:"worstShedFraction"`
}

type diagnosticJSON struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type planJSON struct {
	Replicas     int              `json:"replicas"`
	TotalPermits int64            `json:"totalPermits"`
	PerPod       perPodJSON       `json:"perPod"`
	Demand       *demandJSON      `json:"demand"`
	Diagnostics  []diagnosticJSON `json:"diagnostics"`
}

type sweepRowJSON struct {
	Replicas     int        `json:"replicas"`
	TotalPermits int64      `json:"totalPermits"`
	PerPod       perPodJSON `json:"perPod"`
	Reasons      []string   `json:"reasons"`
}

type sweepJSON struct {
	Sweep          []sweepRowJSON `json:"sweep"`
	LastWithPermit int            `json:"lastWithPermit"`
	FirstBelowOne  *int           `json:"firstBelowOne"`
}

func perPodJSONOf(p sizing.PerPod) perPodJSON {
	return perPodJSON{
		Permits:               p.Permits,
		QueueCapacity:         p.QueueCapacity,
		Workers:               p.Workers,
		RatePerSecond:         p.RatePerSecond,
		Burst:                 p.Burst,
		CapacityPerSecond:     p.CapacityPerSecond,
		MaxQueueWaitSeconds:   seconds(p.MaxQueueWait),
		AcquireTimeoutSeconds: seconds(p.AcquireTimeout),
		RetryBudgetPerSecond:  p.RetryBudgetPerSecond,
	}
}

func planJSONOf(p quotaplan.Plan) planJSON {
	out := planJSON{
		Replicas:     p.Input.Divisor,
		TotalPermits: p.Result.TotalPermits,
		PerPod:       perPodJSONOf(p.Result.PerPod),
		Diagnostics:  []diagnosticJSON{},
	}
	if d := p.Result.Demand; d != nil {
		out.Demand = &demandJSON{
			InFlight:       d.InFlight,
			Available:      d.Available,
			GoodputCeiling: d.GoodputCeilingPerSecond,
			ShedFraction:   d.ShedFraction,
		}
		if p.Input.WorstLatency > 0 {
			out.Demand.WorstInFlight = &d.WorstInFlight
			out.Demand.WorstShedFraction = &d.WorstShedFraction
		}
	}
	for _, d := range p.Result.Diagnostics {
		out.Diagnostics = append(out.Diagnostics, diagnosticJSON{Reason: d.Reason, Message: d.Message})
	}
	return out
}

func sweepJSONOf(s sizing.SweepResult) sweepJSON {
	out := sweepJSON{Sweep: make([]sweepRowJSON, 0, len(s.Rows)), LastWithPermit: s.LastWithPermit}
	if s.FirstBelowOne > 0 {
		first := s.FirstBelowOne
		out.FirstBelowOne = &first
	}
	for _, row := range s.Rows {
		out.Sweep = append(out.Sweep, sweepRowJSON{
			Replicas:     row.Replicas,
			TotalPermits: row.Plan.TotalPermits,
			PerPod:       perPodJSONOf(row.Plan.PerPod),
			Reasons:      reasons(row.Plan.Diagnostics),
		})
	}
	return out
}

func reasons(diags []sizing.Diagnostic) []string {
	out := make([]string, 0, len(diags))
	for _, d := range diags {
		out = append(out, d.Reason)
	}
	return out
}

// writePlanTable prints the plan with the formula behind each number.
func writePlanTable(out io.Writer, name, downstream string, p quotaplan.Plan) error {
	in, res := p.Input, p.Result
	pp := res.PerPod
	n := in.Divisor

	subject := "Plan"
	if name != "" {
		subject = name
		if downstream != "" {
			subject += " → " + downstream
		}
	}
	fmt.Fprintf(out, "%s: %d in flight × %d%% safety over %s (below one: %s)\n\n",
		subject, in.Concurrency, in.SafetyPercent, replicaCount(n), in.BelowOne)

	t := newTable(out, "PER POD", "VALUE", "FORMULA")
	t.row("permits", fmt.Sprint(pp.Permits), permitsFormula(in, res))
	if in.RatePerSecond == 0 {
		t.row("rate", "none", "the contract has no rate")
		t.row("burst", "none", "the contract has no rate")
	} else {
		t.row("rate", perSec(pp.RatePerSecond), fmt.Sprintf("rate × safety / replicas = %s × %d%% / %d", perSec(in.RatePerSecond), in.SafetyPercent, n))
		t.row("burst", fmt.Sprint(pp.Burst), fmt.Sprintf("max(1, floor(burst × safety / replicas)) = max(1, floor(%d × %d%% / %d))", in.Burst, in.SafetyPercent, n))
	}
	t.row("capacity", perSec(pp.CapacityPerSecond), fmt.Sprintf("permits / latency = %d / %s", pp.Permits, in.Latency))
	t.row("max queue wait", pp.MaxQueueWait.String(), queueWaitFormula(in, res))
	t.row("queue capacity", fmt.Sprint(pp.QueueCapacity), fmt.Sprintf("floor(permits × max queue wait / latency) = floor(%d × %s / %s)", pp.Permits, pp.MaxQueueWait, in.Latency))
	if in.AcquireTimeout != nil {
		t.row("acquire timeout", pp.AcquireTimeout.String(), fmt.Sprintf("min(acquire timeout, max queue wait) = min(%s, %s)", *in.AcquireTimeout, pp.MaxQueueWait))
	} else {
		t.row("acquire timeout", pp.AcquireTimeout.String(), "max queue wait (no acquire timeout given)")
	}
	if in.DemandPerSecond > 0 {
		t.row("workers", fmt.Sprint(pp.Workers), fmt.Sprintf("min(permits, ceil(demand / replicas × latency)) = min(%d, ceil(%s / %d × %s) = %d)",
			pp.Permits, perSec(in.DemandPerSecond), n, in.Latency, res.DemandWorkers))
	} else {
		t.row("workers", fmt.Sprint(pp.Workers), "permits (no demand given)")
	}
	t.row("retry budget", perSec(pp.RetryBudgetPerSecond), fmt.Sprintf("budget / replicas = %s / %d", perSec(in.RetryBudgetPerSecond), n))
	if err := t.flush(); err != nil {
		return err
	}

	if d := res.Demand; d != nil {
		fmt.Fprintln(out)
		t := newTable(out, "DEMAND", "VALUE", "FORMULA")
		t.row("in flight", num(d.InFlight), fmt.Sprintf("demand × latency = %s × %s", perSec(in.DemandPerSecond), in.Latency))
		if in.WorstLatency > 0 {
			t.row("in flight, worst", num(d.WorstInFlight), fmt.Sprintf("demand × worst latency = %s × %s", perSec(in.DemandPerSecond), in.WorstLatency))
		}
		t.row("available", fmt.Sprint(d.Available), fmt.Sprintf("min(permits × replicas, concurrency) = min(%d × %d, %d)", pp.Permits, n, in.Concurrency))
		t.row("goodput ceiling", perSec(d.GoodputCeilingPerSecond), fmt.Sprintf("available / latency = %d / %s", d.Available, in.Latency))
		t.row("shed", percent(d.ShedFraction), fmt.Sprintf("max(0, 1 − available / in flight) = max(0, 1 − %d / %s)", d.Available, num(d.InFlight)))
		if in.WorstLatency > 0 {
			t.row("shed, worst", percent(d.WorstShedFraction), fmt.Sprintf("max(0, 1 − available / in flight, worst) = max(0, 1 − %d / %s)", d.Available, num(d.WorstInFlight)))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(out)
	if len(res.Diagnostics) == 0 {
		_, err := fmt.Fprintln(out, "No diagnostics.")
		return err
	}
	t = newTable(out, "DIAGNOSTIC", "FINDING")
	for _, d := range res.Diagnostics {
		t.row(d.Reason, d.Message)
	}
	return t.flush()
}

func permitsFormula(in sizing.Input, res sizing.PlanResult) string {
	f := fmt.Sprintf("floor(concurrency × safety / replicas) = floor(%d × %d%% / %d) = floor(%s)",
		in.Concurrency, in.SafetyPercent, in.Divisor, truncated(res.Share))
	if res.Share < 1 {
		if in.BelowOne == sizing.AtLeastOne {
			return f + ", raised to 1 by AtLeastOne"
		}
		return f + ", left at 0 by Strict"
	}
	return f
}

func queueWaitFormula(in sizing.Input, res sizing.PlanResult) string {
	switch res.QueueWaitRule {
	case sizing.QueueWaitGiven:
		return fmt.Sprintf("given, and within deadline − latency = %s − %s", in.Deadline, in.Latency)
	case sizing.QueueWaitDerived:
		return fmt.Sprintf("(deadline − latency) / 2 = (%s − %s) / 2", in.Deadline, in.Latency)
	case sizing.QueueWaitClamped:
		return fmt.Sprintf("%s given, lowered to deadline − latency = %s − %s", *in.MaxQueueWait, in.Deadline, in.Latency)
	default:
		return fmt.Sprintf("none: deadline %s ≤ latency %s", in.Deadline, in.Latency)
	}
}

func replicaCount(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", n)
}

// writeSweepTable prints one row per divisor.
func writeSweepTable(out io.Writer, name string, in sizing.Input, s sizing.SweepResult) error {
	subject := "Sweep"
	if name != "" {
		subject = name
	}
	handedOut := float64(in.Concurrency) * float64(in.SafetyPercent) / 100
	fmt.Fprintf(out, "%s: %d in flight × %d%% safety = %s permits to divide (below one: %s)\n",
		subject, in.Concurrency, in.SafetyPercent, num(handedOut), in.BelowOne)
	switch {
	case s.LastWithPermit == 0:
		fmt.Fprintln(out, "No replica count gives a pod a whole permit.")
	case s.FirstBelowOne > 0:
		fmt.Fprintf(out, "Each pod gets a whole permit up to %s; from %d replicas on the share is below one permit.\n",
			replicaCount(s.LastWithPermit), s.FirstBelowOne)
	default:
		fmt.Fprintf(out, "Each pod gets a whole permit up to %s: at every count in this range.\n", replicaCount(s.LastWithPermit))
	}
	fmt.Fprintln(out)

	t := newTable(out, "REPLICAS", "PERMITS", "IN FLIGHT", "QUEUE", "MAX WAIT", "WORKERS", "RATE", "BURST", "RETRY BUDGET", "DIAGNOSTICS")
	for _, row := range s.Rows {
		pp := row.Plan.PerPod
		rate, burst := "none", "none"
		if in.RatePerSecond > 0 {
			rate, burst = perSec(pp.RatePerSecond), fmt.Sprint(pp.Burst)
		}
		diags := strings.Join(reasons(row.Plan.Diagnostics), ", ")
		if diags == "" {
			diags = "-"
		}
		t.row(fmt.Sprint(row.Replicas), fmt.Sprint(pp.Permits), fmt.Sprint(row.Plan.TotalPermits), fmt.Sprint(pp.QueueCapacity),
			pp.MaxQueueWait.String(), fmt.Sprint(pp.Workers), rate, burst, perSec(pp.RetryBudgetPerSecond), diags)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, "\nIN FLIGHT is permits × replicas, what all pods may hold at once.")
	return err
}
