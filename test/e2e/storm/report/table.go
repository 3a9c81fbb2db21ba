package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// tableHeader and tableRow lay out the report's main table; the text and
// markdown forms share them.
var tableHeader = []string{
	"variant", "downstream 429s", "peak in-flight", "local sheds", "goodput/s",
	"gateway p50 / p99", "reload p50 / p99", "acknowledged",
}

func tableRow(r *Report, v *VariantReport) []string {
	reload, acked := "–", "–"
	if rl := v.ReloadLatencySeconds; rl != nil && rl.Count > 0 {
		reload = fmt.Sprintf("%s / %s", ms(rl.P50), ms(rl.P99))
	}
	if ro := v.Rollout; ro != nil {
		acked = fmt.Sprintf("%d/%d", ro.Acknowledged, ro.Total)
	}
	return []string{
		v.Name,
		fmt.Sprintf("%d (%.1f%%)", v.Downstream429, 100*v.Downstream429Fraction),
		fmt.Sprintf("%d (contract %d)", v.PeakInFlight, r.Contract),
		fmt.Sprintf("%d (%.1f%%)", v.LocalSheds, 100*v.LocalShedFraction),
		fmt.Sprintf("%.1f", v.GoodputPerSecond),
		fmt.Sprintf("%s / %s", ms(v.GatewayP50Seconds), ms(v.GatewayP99Seconds)),
		reload,
		acked,
	}
}

func ms(s float64) string {
	switch {
	case s < 0.01:
		return fmt.Sprintf("%.1f ms", s*1000)
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}

// WriteTable writes the report for a terminal: the main table, the
// per-phase goodput and peaks, the harness's load, and the goals.
func WriteTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Contract %d in flight, %d%% handed out, typical latency %v: goodput ceiling %.1f/s. Load %.0f requests/s for %.0fs per variant.\n\n",
		r.Contract, r.SafetyPercent, time.Duration(r.TypicalLatencySeconds*float64(time.Second)), r.GoodputCeilingPerSecond, r.RequestsPerSecond, r.DurationSeconds)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	for _, name := range r.Order {
		fmt.Fprintln(tw, strings.Join(tableRow(r, r.Variants[name]), "\t"))
	}
	fmt.Fprintln(tw)

	fmt.Fprintln(tw, "phase\tvariant\tgoodput/s\t429s\tpeak in-flight\tready pods at end\tgateway p99")
	for _, name := range r.Order {
		for _, p := range r.Variants[name].Phases {
			steady := ""
			if p.Steady {
				steady = " (steady)"
			}
			goodput := "–"
			if p.MeasuredSeconds > 0 {
				goodput = fmt.Sprintf("%.1f", p.GoodputPerSecond)
			}
			fmt.Fprintf(tw, "%.0f–%.0fs %s%s\t%s\t%s\t%d\t%d\t%d\t%s\n",
				p.From, p.To, p.Name, steady, name, goodput, p.Downstream429, p.PeakInFlight, p.ReadyPodsAtEnd, ms(p.GatewayP99))
		}
	}
	fmt.Fprintln(tw)

	for _, name := range r.Order {
		steps := r.Variants[name].ScaleSteps
		if len(steps) == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s: autoscaler step\tfirst new plan after\tplans\tsettled plan after\tsettled: permits handed out\tapplied by running pods: p50 / max after the decision\n", name)
		for _, st := range steps {
			fmt.Fprintf(tw, "%.0fs: %d → %d\t%s\t%d\t%s\t%d\t%s / %s (%d pods)\n", st.At, st.From, st.To, ms(st.FirstPlanSeconds), st.Plans,
				ms(st.SettledPlanSeconds), st.SettledHandedOut, ms(st.AppliedP50Seconds), ms(st.AppliedMaxSeconds), st.AppliedBy)
		}
		fmt.Fprintln(tw)
	}

	for _, name := range r.Order {
		c := r.Variants[name].Capacity
		if c == nil {
			continue
		}
		fmt.Fprintf(tw, "%s: permits held by Ready pods\tthis run\tprevious division, same pod timeline\n", name)
		fmt.Fprintf(tw, "integrated over %.1fs (usable %d)\t%.1f%% (%.1f permit-s lost)\t%.1f%% (%.1f permit-s lost)\n",
			c.Seconds, c.Usable, 100*c.HeldFraction, c.LostPermitSeconds, 100*c.PreviousHeldFraction, c.PreviousLostPermitSeconds)
		for _, st := range c.Steps {
			fmt.Fprintf(tw, "%.0f–%.0fs at %d replicas: permit-s lost\t%.1f\t%.1f\n", st.From, st.To, st.Replicas, st.Lost, st.PreviousLost)
		}
		fmt.Fprintf(tw, "peak permits of the running pods\t%d\t%d (above the contract %d for %.1fs)\n",
			PeakPermits(r.Variants[name]), c.PreviousPeakPermits, r.Contract, c.PreviousOverContractSeconds)
		fmt.Fprintln(tw)
	}

	fmt.Fprintln(tw, "variant\tload achieved/s (target)\tdropped by the harness\tanswered: ok / shed / 502 / pod 429-503 / error\terrors")
	for _, name := range r.Order {
		l := r.Variants[name].Load
		var kinds []string
		for _, k := range sortedKeys(l.Errors) {
			kinds = append(kinds, fmt.Sprintf("%s: %d", k, l.Errors[k]))
		}
		fmt.Fprintf(tw, "%s\t%.0f (%.0f)\t%d\t%d / %d / %d / %d / %d\t%s\n", name, l.AchievedPerSecond, l.TargetPerSecond, l.Dropped,
			l.Answered[traffic.OutcomeOK.String()], l.Answered[traffic.OutcomeShed.String()], l.Answered[traffic.OutcomeDownstreamError.String()],
			l.Answered[traffic.OutcomePodRejected.String()], l.Answered[traffic.OutcomeError.String()], strings.Join(kinds, ", "))
	}
	fmt.Fprintln(tw)

	fmt.Fprintln(tw, "goal\tvariant\twant\tgot\tresult")
	for _, g := range r.Goals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Goal, g.Variant, g.Want, g.Got, goalResult(g))
	}
	return tw.Flush()
}

func goalResult(g Goal) string {
	switch {
	case !g.Asserted:
		return "reported"
	case g.Met:
		return "met"
	default:
		return "NOT MET"
	}
}

// WriteMarkdown writes the main table and the goals as markdown, for
// docs/demo.md.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	row := func(cells []string) { b.WriteString("| " + strings.Join(cells, " | ") + " |\n") }
	row(tableHeader)
	sep := make([]string, len(tableHeader))
	for i := range sep {
		sep[i] = "---"
	}
	row(sep)
	for _, name := range r.Order {
		row(tableRow(r, r.Variants[name]))
	}
	b.WriteString("\n")
	row([]string{"goal", "variant", "want", "got", "result"})
	row([]string{"---", "---", "---", "---", "---"})
	for _, g := range r.Goals {
		row([]string{g.Goal, g.Variant, g.Want, g.Got, goalResult(g)})
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// PeakPermits returns the most permits the running pods enforced together
// in a sample.
func PeakPermits(v *VariantReport) int {
	n := 0
	for _, p := range v.Timeline {
		n = max(n, p.Permits)
	}
	return n
}
