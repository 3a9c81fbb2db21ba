package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
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
	Replicas int `json:"replicas"`
	// Usable is A, the permits handed out over the pods.
	Usable int64 `json:"usable"`
	// Base is floor(A / replicas); Extra pods hold Base+1.
	Base  int64 `json:"base"`
	Extra int64 `json:"extra"`
	// TotalPermits is the permits the pods hold together: A, or the
	// replica count when AtLeastOne raised every pod to 1.
	TotalPermits int64 `json:"totalPermits"`
	// PreviousTotalPermits is what the previous division, Base for every
	// pod, held: Base × replicas.
	PreviousTotalPermits int64            `json:"previousTotalPermits"`
	PerPod               perPodJSON       `json:"perPod"`
	PerPodExtra          *perPodJSON      `json:"perPodExtra"`
	Demand               *demandJSON      `json:"demand"`
	Diagnostics          []diagnosticJSON `json:"diagnostics"`
}

type sweepRowJSON struct {
	Replicas             int         `json:"replicas"`
	Base                 int64       `json:"base"`
	Extra                int64       `json:"extra"`
	TotalPermits         int64       `json:"totalPermits"`
	PreviousTotalPermits int64       `json:"previousTotalPermits"`
	PerPod               perPodJSON  `json:"perPod"`
	PerPodExtra          *perPodJSON `json:"perPodExtra"`
	Reasons              []string    `json:"reasons"`
}

type sweepJSON struct {
	Usable         int64          `json:"usable"`
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

func perPodExtraJSONOf(r sizing.Result) *perPodJSON {
	if r.PerPodExtra == nil {
		return nil
	}
	out := perPodJSONOf(*r.PerPodExtra)
	return &out
}

// previousTotal is what the division before the exact one held: Base for
// every pod (floor(C·s/N) is floor(floor(C·s)/N)), raised to 1 by
// AtLeastOne as it is now.
func previousTotal(r sizing.Result, replicas int) int64 { return r.Base * int64(replicas) }

func planJSONOf(p quota.Sizing) planJSON {
	r := p.Result
	out := planJSON{
		Replicas:             p.Input.Divisor,
		Usable:               r.Usable,
		Base:                 r.Base,
		Extra:                r.Extra,
		TotalPermits:         r.TotalPermits,
		PreviousTotalPermits: previousTotal(r, p.Input.Divisor),
		PerPod:               perPodJSONOf(r.PerPod),
		PerPodExtra:          perPodExtraJSONOf(r),
		Diagnostics:          []diagnosticJSON{},
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
	if len(s.Rows) > 0 {
		out.Usable = s.Rows[0].Result.Usable
	}
	if s.FirstBelowOne > 0 {
		first := s.FirstBelowOne
		out.FirstBelowOne = &first
	}
	for _, row := range s.Rows {
		out.Sweep = append(out.Sweep, sweepRowJSON{
			Replicas:             row.Replicas,
			Base:                 row.Result.Base,
			Extra:                row.Result.Extra,
			TotalPermits:         row.Result.TotalPermits,
			PreviousTotalPermits: previousTotal(row.Result, row.Replicas),
			PerPod:               perPodJSONOf(row.Result.PerPod),
			PerPodExtra:          perPodExtraJSONOf(row.Result),
			Reasons:              reasons(row.Result.Diagnostics),
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

// writePlanTable prints the division and each pod's share with the formula
// behind each number.
func writePlanTable(out io.Writer, name, downstream string, p quota.Sizing) error {
	in, res := p.Input, p.Result
	n := in.Divisor

	subject := "Plan"
	if name != "" {
		subject = name
		if downstream != "" {
			subject += " → " + downstream
		}
	}
	if in.Part != nil {
		fmt.Fprintf(out, "%s: its part of the shared contract, %s, over %s (below one: %s)\n",
			subject, division.Permits(res.Usable), division.Replicas(int64(n)), in.BelowOne)
	} else {
		fmt.Fprintf(out, "%s: %s × %d%% safety over %s (below one: %s)\n",
			subject, contractText(in), in.SafetyPercent, division.Replicas(int64(n)), in.BelowOne)
	}
	// The division's equation, word for word as the quota's events give it.
	fmt.Fprintf(out, "%s\n\n", res.Division(n).Equation())

	if err := writeDivision(out, in, res); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := writeShares(out, in, res); err != nil {
		return err
	}

	if d := res.Demand; d != nil {
		fmt.Fprintln(out)
		t := newTable(out, "DEMAND", "VALUE", "FORMULA")
		t.row("in flight", num(d.InFlight), fmt.Sprintf("demand × latency = %s × %s", perSec(in.DemandPerSecond), in.Latency))
		if in.WorstLatency > 0 {
			t.row("in flight, worst", num(d.WorstInFlight), fmt.Sprintf("demand × worst latency = %s × %s", perSec(in.DemandPerSecond), in.WorstLatency))
		}
		t.row("available", fmt.Sprint(d.Available), fmt.Sprintf("min(in use, concurrency) = min(%d, %d)", res.TotalPermits, in.Concurrency))
		t.row("goodput ceiling", perSec(d.GoodputCeilingPerSecond), fmt.Sprintf("available / latency = %d / %s", d.Available, in.Latency))
		t.row("shed", percent(d.ShedFraction), fmt.Sprintf("max(0, 1 − available / in flight) = max(0, 1 − %d / %s)", d.Available, num(d.InFlight)))
		if in.WorstLatency > 0 {
			t.row("shed, worst", percent(d.WorstShedFraction), fmt.Sprintf("max(0, 1 − available / in flight, worst) = max(0, 1 − %d / %s)", d.Available, num(d.WorstInFlight)))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}

	return writeDiagnostics(out, res.Diagnostics, func(d sizing.Diagnostic) (string, string) { return d.Reason, d.Message })
}

// writeDiagnostics ends a plan or a status view with its findings: a blank
// line, then a DIAGNOSTIC/FINDING table, or "No diagnostics.".
func writeDiagnostics[D any](out io.Writer, diags []D, finding func(D) (reason, message string)) error {
	fmt.Fprintln(out)
	if len(diags) == 0 {
		_, err := fmt.Fprintln(out, "No diagnostics.")
		return err
	}
	t := newTable(out, "DIAGNOSTIC", "FINDING")
	for _, d := range diags {
		t.row(finding(d))
	}
	return t.flush()
}

// contractText states the contract and this cluster's part of it.
func contractText(in sizing.Input) string {
	if clusterShared(in) {
		return fmt.Sprintf("%d in flight, %d of them for this cluster,", in.Concurrency, in.ClusterConcurrency)
	}
	return fmt.Sprintf("%d in flight", in.Concurrency)
}

func clusterShared(in sizing.Input) bool {
	return in.ClusterConcurrency > 0 && in.ClusterConcurrency < in.Concurrency
}

// writeDivision prints how the usable permits are divided over the pods.
func writeDivision(out io.Writer, in sizing.Input, res sizing.Result) error {
	n := int64(in.Divisor)
	t := newTable(out, "DIVISION", "VALUE", "FORMULA")
	t.row("usable", fmt.Sprint(res.Usable), usableFormula(in))
	t.row("base", fmt.Sprint(res.Base), baseFormula(in, res))
	if res.TotalPermits > res.Usable {
		t.row("extra", fmt.Sprint(res.Extra), "none: AtLeastOne gives every pod 1 permit")
	} else {
		t.row("extra", fmt.Sprint(res.Extra), fmt.Sprintf("usable mod replicas = %d mod %d: the pods holding base + 1", res.Usable, n))
	}
	t.row("in use", fmt.Sprint(res.TotalPermits), inUseFormula(in, res))
	prev := previousTotal(res, in.Divisor)
	t.row("previous", fmt.Sprint(prev), fmt.Sprintf("base × replicas = %d × %d, the division before every permit was handed out (%s)", res.Base, n, ofUsable(prev, res.Usable)))
	switch {
	case res.UsableRatePerSecond > 0 && in.Part != nil:
		t.row("usable rate", perSec(res.UsableRatePerSecond), "this caller's part of the contract's usable rate")
		t.row("usable burst", fmt.Sprint(res.UsableBurst), "this caller's part of the usable burst, with its part of the rate")
	case res.UsableRatePerSecond > 0:
		rule, values := scaledFormula("rate", perSec(in.RatePerSecond), in)
		t.row("usable rate", perSec(res.UsableRatePerSecond), rule+" = "+values)
		rule, values = scaledFormula("burst", fmt.Sprint(in.Burst), in)
		t.row("usable burst", fmt.Sprint(res.UsableBurst), "floor("+rule+") = floor("+values+")")
	}
	return t.flush()
}

func usableFormula(in sizing.Input) string {
	if in.Part != nil {
		return "this caller's part of the shared contract (see the split over callers)"
	}
	if clusterShared(in) {
		return fmt.Sprintf("floor(cluster share × safety) = floor(%d × %d%%)", in.ClusterConcurrency, in.SafetyPercent)
	}
	return fmt.Sprintf("floor(concurrency × safety) = floor(%d × %d%%)", in.Concurrency, in.SafetyPercent)
}

// scaledFormula states a contract figure scaled to this cluster and the
// safety percentage: the rule, and the rule with the values.
func scaledFormula(what, value string, in sizing.Input) (string, string) {
	if clusterShared(in) {
		return what + " × cluster share / concurrency × safety", fmt.Sprintf("%s × %d / %d × %d%%", value, in.ClusterConcurrency, in.Concurrency, in.SafetyPercent)
	}
	return what + " × safety", fmt.Sprintf("%s × %d%%", value, in.SafetyPercent)
}

func baseFormula(in sizing.Input, res sizing.Result) string {
	f := fmt.Sprintf("floor(usable / replicas) = floor(%d / %d)", res.Usable, in.Divisor)
	if res.Usable < int64(in.Divisor) && in.BelowOne == sizing.AtLeastOne {
		return f + " = 0, raised to 1 by AtLeastOne"
	}
	return f
}

// inUseFormula states what the pods hold together, as sizing states it in
// the status and the controller in its events: "2 permits × 19 replicas +
// 1 permit × 2 replicas = 40".
func inUseFormula(in sizing.Input, res sizing.Result) string {
	d := res.Division(in.Divisor)
	f := fmt.Sprintf("%s = %d", d.Holds(), d.InUse())
	switch {
	case res.TotalPermits > res.Usable:
		return f + fmt.Sprintf(", %d above usable: AtLeastOne over-commits", res.TotalPermits-res.Usable)
	case res.Usable > 0:
		return f + ", every usable permit"
	}
	return f
}

func podsWord(n int64) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// ofUsable states a count of permits as a percentage of the usable ones.
func ofUsable(n, usable int64) string {
	if usable == 0 {
		return "no usable permit"
	}
	return shortPercent(n, usable) + " of usable"
}

// writeShares prints the share of a pod at base and, when some pods hold
// one more, at base+1, side by side.
func writeShares(out io.Writer, in sizing.Input, res sizing.Result) error {
	shares := []sizing.PerPod{res.PerPod}
	header := []string{"PER POD", "VALUE"}
	if res.PerPodExtra != nil {
		shares = append(shares, *res.PerPodExtra)
		n := int64(in.Divisor)
		header = []string{"PER POD", fmt.Sprintf("BASE (%s)", strings.ToUpper(podsWord(n-res.Extra))), fmt.Sprintf("BASE+1 (%s)", strings.ToUpper(podsWord(res.Extra)))}
	}
	t := newTable(out, append(header, "FORMULA")...)
	row := func(name string, value func(sizing.PerPod) string, formula string) {
		cells := []string{name}
		for _, s := range shares {
			cells = append(cells, value(s))
		}
		t.row(append(cells, formula)...)
	}
	// each joins a formula's numbers for every share: "2 / 220ms, 3 / 220ms".
	each := func(f func(sizing.PerPod) string) string {
		parts := make([]string, 0, len(shares))
		for _, s := range shares {
			parts = append(parts, f(s))
		}
		return strings.Join(parts, ", ")
	}

	zeroNote := ""
	if res.PerPod.Permits == 0 {
		zeroNote = "; 0 without permits"
	}
	permitsRule := "base"
	if len(shares) > 1 {
		permitsRule = "base, base + 1"
	}
	row("permits", func(s sizing.PerPod) string { return fmt.Sprint(s.Permits) }, permitsRule)
	if res.UsableRatePerSecond == 0 {
		row("rate", func(sizing.PerPod) string { return "none" }, "the contract has no rate")
		row("burst", func(sizing.PerPod) string { return "none" }, "the contract has no rate")
	} else {
		row("rate", func(s sizing.PerPod) string { return perSec(s.RatePerSecond) },
			"usable rate × permits / in use = "+each(func(s sizing.PerPod) string {
				return fmt.Sprintf("%s × %d / %d", perSec(res.UsableRatePerSecond), s.Permits, res.TotalPermits)
			}))
		row("burst", func(s sizing.PerPod) string { return fmt.Sprint(s.Burst) },
			"max(1, floor(usable burst × permits / in use)) = "+each(func(s sizing.PerPod) string {
				return fmt.Sprintf("max(1, floor(%d × %d / %d))", res.UsableBurst, s.Permits, res.TotalPermits)
			})+zeroNote)
	}
	row("capacity", func(s sizing.PerPod) string { return perSec(s.CapacityPerSecond) },
		"permits / latency = "+each(func(s sizing.PerPod) string { return fmt.Sprintf("%d / %s", s.Permits, in.Latency) }))
	pp := res.PerPod
	row("max queue wait", func(s sizing.PerPod) string { return s.MaxQueueWait.String() }, queueWaitFormula(in, res))
	row("queue capacity", func(s sizing.PerPod) string { return fmt.Sprint(s.QueueCapacity) },
		"floor(permits × max queue wait / latency) = "+each(func(s sizing.PerPod) string {
			return fmt.Sprintf("floor(%d × %s / %s)", s.Permits, s.MaxQueueWait, in.Latency)
		}))
	if in.AcquireTimeout != nil {
		row("acquire timeout", func(s sizing.PerPod) string { return s.AcquireTimeout.String() },
			fmt.Sprintf("min(acquire timeout, max queue wait) = min(%s, %s)", *in.AcquireTimeout, pp.MaxQueueWait))
	} else {
		row("acquire timeout", func(s sizing.PerPod) string { return s.AcquireTimeout.String() }, "max queue wait (no acquire timeout given)")
	}
	if in.DemandPerSecond > 0 {
		first := true
		row("workers", func(s sizing.PerPod) string { return fmt.Sprint(s.Workers) },
			"min(permits, ceil(demand / replicas × latency)) = "+each(func(s sizing.PerPod) string {
				if first {
					first = false
					return fmt.Sprintf("min(%d, ceil(%s / %d × %s) = %d)", s.Permits, perSec(in.DemandPerSecond), in.Divisor, in.Latency, res.DemandWorkers)
				}
				return fmt.Sprintf("min(%d, %d)", s.Permits, res.DemandWorkers)
			}))
	} else {
		row("workers", func(s sizing.PerPod) string { return fmt.Sprint(s.Workers) }, "permits (no demand given)")
	}
	budgetRule := "no permit in use, no retry budget"
	if res.TotalPermits > 0 {
		budgetRule = "usable budget × permits / in use = " + each(func(s sizing.PerPod) string {
			return fmt.Sprintf("%s × %d / %d", perSec(res.UsableRetryBudgetPerSecond), s.Permits, res.TotalPermits)
		})
	}
	row("retry budget", func(s sizing.PerPod) string { return perSec(s.RetryBudgetPerSecond) }, budgetRule)
	return t.flush()
}

func queueWaitFormula(in sizing.Input, res sizing.Result) string {
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

// writeSweepHeader states the usable permits and where a pod's share
// falls below one permit.
func writeSweepHeader(out io.Writer, name string, in sizing.Input, s sizing.SweepResult) {
	subject := "Sweep"
	if name != "" {
		subject = name
	}
	usable := int64(s.LastWithPermit)
	fmt.Fprintf(out, "%s: %s to divide (below one: %s)\n", subject, usableText(in, usable), in.BelowOne)
	switch {
	case s.LastWithPermit == 0:
		fmt.Fprintln(out, "No replica count gives a pod a whole permit.")
	case s.FirstBelowOne > 0 && in.BelowOne == sizing.AtLeastOne:
		fmt.Fprintf(out, "Every pod holds at least one permit up to %s; from %d replicas on AtLeastOne gives every pod 1 and over-commits.\n",
			division.Replicas(int64(s.LastWithPermit)), s.FirstBelowOne)
	case s.FirstBelowOne > 0:
		fmt.Fprintf(out, "Every pod holds at least one permit up to %s; from %d replicas on Strict gives %d pods 1 permit and the others none.\n",
			division.Replicas(int64(s.LastWithPermit)), s.FirstBelowOne, usable)
	default:
		fmt.Fprintf(out, "Every pod holds at least one permit up to %s: at every count in this range.\n", division.Replicas(int64(s.LastWithPermit)))
	}
	fmt.Fprintln(out)
}

// writeSweepTable prints one row per divisor.
func writeSweepTable(out io.Writer, name string, in sizing.Input, s sizing.SweepResult) error {
	writeSweepHeader(out, name, in, s)
	t := newTable(out, "REPLICAS", "BASE", "+1 PODS", "IN USE", "PREVIOUS", "QUEUE", "MAX WAIT", "WORKERS", "RATE", "BURST", "RETRY BUDGET", "DIAGNOSTICS")
	for _, row := range s.Rows {
		r := row.Result
		// both formats a figure at base and, when some pods hold one more
		// and it differs there, at base+1 after a bar.
		both := func(f func(sizing.PerPod) string) string {
			if r.PerPodExtra == nil || f(r.PerPod) == f(*r.PerPodExtra) {
				return f(r.PerPod)
			}
			return f(r.PerPod) + "|" + f(*r.PerPodExtra)
		}
		rate, burst := "none", "none"
		if r.UsableRatePerSecond > 0 {
			rate = both(func(p sizing.PerPod) string { return perSec(p.RatePerSecond) })
			burst = both(func(p sizing.PerPod) string { return fmt.Sprint(p.Burst) })
		}
		diags := strings.Join(reasons(r.Diagnostics), ", ")
		if diags == "" {
			diags = "-"
		}
		prev := previousTotal(r, row.Replicas)
		t.row(fmt.Sprint(row.Replicas), fmt.Sprint(r.Base), fmt.Sprint(r.Extra),
			fmt.Sprintf("%d (%s)", r.TotalPermits, shortPercent(r.TotalPermits, r.Usable)), fmt.Sprintf("%d (%s)", prev, shortPercent(prev, r.Usable)),
			both(func(p sizing.PerPod) string { return fmt.Sprint(p.QueueCapacity) }), r.PerPod.MaxQueueWait.String(),
			both(func(p sizing.PerPod) string { return fmt.Sprint(p.Workers) }), rate, burst,
			both(func(p sizing.PerPod) string { return perSec(p.RetryBudgetPerSecond) }), diags)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, `
BASE is every pod's permits and +1 PODS the number holding one more; a cell
"a|b" gives a pod's figure at BASE, then at BASE+1. IN USE is what all pods hold
at once, PREVIOUS what they held when every pod got BASE, each with its part of
the usable permits.`)
	return err
}

// writeCompareTable prints the permits in use at each divisor, now and
// under the previous division, and what the range adds up to.
func writeCompareTable(out io.Writer, name string, in sizing.Input, s sizing.SweepResult) error {
	writeSweepHeader(out, name, in, s)
	t := newTable(out, "REPLICAS", "BASE", "+1 PODS", "IN USE", "PREVIOUS", "GAINED")
	var now, before, usable int64
	for _, row := range s.Rows {
		r := row.Result
		prev := previousTotal(r, row.Replicas)
		now, before, usable = now+r.TotalPermits, before+prev, usable+r.Usable
		t.row(fmt.Sprint(row.Replicas), fmt.Sprint(r.Base), fmt.Sprint(r.Extra),
			fmt.Sprintf("%d (%s)", r.TotalPermits, shortPercent(r.TotalPermits, r.Usable)),
			fmt.Sprintf("%d (%s)", prev, shortPercent(prev, r.Usable)), fmt.Sprint(r.TotalPermits-prev))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\nOver %d..%d replicas the pods hold %s of the usable permits; under the previous division, %s.\n",
		s.Rows[0].Replicas, s.Rows[len(s.Rows)-1].Replicas, shortPercent(now, usable), shortPercent(before, usable))
	return err
}

// shortPercent states n of total as a percentage: "70%", "52.5%".
func shortPercent(n, total int64) string {
	if total == 0 {
		return "-"
	}
	p := percent(float64(n) / float64(total))
	if trimmed, ok := strings.CutSuffix(p, ".0%"); ok {
		return trimmed + "%"
	}
	return p
}

// usableText states A with its arithmetic: "50 × 80% = 40 permits", with
// floor() when the product is not whole.
func usableText(in sizing.Input, usable int64) string {
	product := fmt.Sprintf("%d in flight × %d%% safety", in.Concurrency, in.SafetyPercent)
	c := in.Concurrency
	if clusterShared(in) {
		product = fmt.Sprintf("%d of %d in flight for this cluster × %d%% safety", in.ClusterConcurrency, in.Concurrency, in.SafetyPercent)
		c = in.ClusterConcurrency
	}
	if int64(c)*int64(in.SafetyPercent)%100 != 0 {
		product = "floor(" + product + ")"
	}
	return product + " = " + division.Permits(usable)
}
