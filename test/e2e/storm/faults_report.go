package storm

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// FaultsReport collects the fault scenarios' figures. Its JSON form is the
// file report-faults.json beside the storm's report.
type FaultsReport struct {
	Failover     *FailoverReport     `json:"failover,omitempty"`
	Restart      *RestartReport      `json:"apiServerRestart,omitempty"`
	FinishedPods *FinishedPodsReport `json:"finishedPods,omitempty"`
	StatefulSet  *StatefulSetReport  `json:"statefulSet,omitempty"`
}

// Empty says whether no scenario has run.
func (r *FaultsReport) Empty() bool {
	return r.Failover == nil && r.Restart == nil && r.FinishedPods == nil && r.StatefulSet == nil
}

// WriteJSON writes the report to path, creating its directory.
func (r *FaultsReport) WriteJSON(path string) error { return report.WriteJSON(path, r) }

// WriteFaultsTable writes the fault scenarios' figures for a terminal.
func WriteFaultsTable(w io.Writer, r *FaultsReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tfigure\tvalue")
	run := func(name string, v *report.VariantReport) {
		if v != nil {
			fmt.Fprintf(tw, "%s\tpeak in-flight, downstream 429s\t%d (contract %d), %d\n", name, v.PeakInFlight, Contract, v.Downstream429)
		}
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(tw, "leader killed\tkilled, survivor\t%s at %.1fs (after %d plan(s) of the scale-up), %s\n", f.Killed, f.KilledAtSeconds, f.PlansBeforeKill, f.Survivor)
		fmt.Fprintf(tw, "leader killed\tkill → survivor leads\t%.2fs (lease %v, renew %v, retry %v)\n", f.TakeoverSeconds, FailoverLeaseDuration, FailoverRenewDeadline, FailoverRetryPeriod)
		fmt.Fprintf(tw, "leader killed\tkill → new leader's first plan\t%.2fs\n", f.FirstPlanSeconds)
		fmt.Fprintf(tw, "leader killed\tkill → plan for the new replica count\t%.2fs (limit %v)\n", f.NewCountPlanSeconds, FailoverLimit)
		run("leader killed", f.Run)
	}
	if s := r.Restart; s != nil {
		fmt.Fprintf(tw, "API server restart\tdown\t%.2fs (from %.1fs)\n", s.DownSeconds, s.StoppedAtSeconds)
		fmt.Fprintf(tw, "API server restart\tback → every pod on the plan for %d pods\t%.2fs (limit %v)\n", restartTo, s.RecoveredSeconds, RestartRecoveryLimit)
		fmt.Fprintf(tw, "API server restart\tmanager restarts (lease lost while down)\t%d\n", s.ManagerRestarts)
		fmt.Fprintf(tw, "API server restart\tReady pods' permits while down\t%d..%d of %d usable\n", s.OutageReadyPermitsMin, s.OutageReadyPermitsMax, Usable())
		run("API server restart", s.Run)
	}
	if p := r.FinishedPods; p != nil {
		for _, c := range p.Checkpoints {
			fmt.Fprintf(tw, "evicted and completed pods\tat %.1fs: Ready pods, divisor, Ready pods' permits\t%d, %d, %d of %d\n", c.AtSeconds, c.ReadyPods, c.Divisor, c.ReadyPermits, Usable())
		}
		run("evicted and completed pods", p.Run)
	}
	if s := r.StatefulSet; s != nil {
		for _, st := range s.Steps {
			fmt.Fprintf(tw, "StatefulSet caller\t%s at %.1fs: decided, settled, Ready pods' permits\t+%.2fs, +%.2fs, %d of %d on %d pods %v\n",
				st.Name, st.AtSeconds, st.DecidedSeconds, st.SettledSeconds, st.ReadyPermits, Usable(), st.ReadyPods, st.Shares)
		}
		fmt.Fprintf(tw, "StatefulSet caller\tpeak permits of the running pods, peak status.division.held\t%d, %d of %d usable\n", s.PeakRunningPermits, s.PeakHeld, Usable())
		fmt.Fprintf(tw, "StatefulSet caller\t%s gone and back: least Ready pods' permits, time below %d\t%d, %.1fs\n", StatefulSetRecreated, Usable(), s.RecreateReadyPermitsMin, s.RecreateBelowUsableSeconds)
		fmt.Fprintf(tw, "StatefulSet caller\tOrderedReady order broken\t%d times\n", len(s.CreationOrder)+len(s.DeletionOrder))
		run("StatefulSet caller", s.Run)
	}
	return tw.Flush()
}
