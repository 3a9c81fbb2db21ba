//go:build e2e

package e2e_test

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// faultsReport collects the fault scenarios' figures for
// _output/storm/report-faults.json.
var faultsReport = &storm.FaultsReport{}

// expectWithinContract asserts that a fault scenario's run sent the
// downstream no call beyond its contract.
func expectWithinContract(r *report.VariantReport) {
	GinkgoHelper()
	Expect(r).NotTo(BeNil())
	for _, p := range r.Phases {
		Expect(p.PeakInFlight).To(BeNumerically("<=", storm.Contract), "peak in-flight in phase %q", p.Name)
	}
	Expect(r.PeakInFlight).To(BeNumerically("<=", storm.Contract))
	Expect(r.Downstream429).To(BeZero(), "downstream 429s")
}

var _ = Describe("Faults", Ordered, ContinueOnFailure, func() {
	AfterAll(func() {
		if harness == nil || faultsReport.Empty() {
			return
		}
		Expect(faultsReport.WriteJSON(filepath.Join(harness.OutDir, "report-faults.json"))).To(Succeed())
		Expect(storm.WriteFaultsTable(GinkgoWriter, faultsReport)).To(Succeed())
	})

	Context("the leading manager killed in the middle of a scale-up", Ordered, func() {
		var f *storm.FailoverReport
		BeforeAll(func(ctx SpecContext) {
			var err error
			f, err = harness.RunFailover(ctx)
			Expect(err).NotTo(HaveOccurred(), "the harness could not run the failover scenario")
			faultsReport.Failover = f
			AddReportEntry("failover", fmt.Sprintf("%s killed at %.1fs after %d plan(s) of the scale-up; %s led %.2fs later, published %.2fs later, the plan for %d pods %.2fs later",
				f.Killed, f.KilledAtSeconds, f.PlansBeforeKill, f.Survivor, f.TakeoverSeconds, f.FirstPlanSeconds, 8, f.NewCountPlanSeconds))
		}, NodeTimeout(2*time.Minute))

		It("killed the leader while the scale-up's handover was under way, and the other replica took over", func() {
			Expect(f.Err).To(BeEmpty())
			Expect(f.Killed).NotTo(BeEmpty())
			Expect(f.Survivor).NotTo(BeEmpty())
			Expect(f.Survivor).NotTo(Equal(f.Killed))
			Expect(f.SurvivorErr).To(BeEmpty(), "the surviving replica exited")
			Expect(f.PlansBeforeKill).To(BeNumerically(">=", 1), "the killed leader had begun the handover")
		})

		It("keeps the peak in-flight within the contract", func() {
			expectWithinContract(f.Run)
		})

		It("has the new leader publish the plan for the new replica count within the lease-derived limit", func() {
			Expect(f.NewCountPlanSeconds).To(BeNumerically(">", 0))
			Expect(f.NewCountPlanSeconds).To(BeNumerically("<=", storm.FailoverLimit.Seconds()),
				"lease %v, renew %v, retry %v", storm.FailoverLeaseDuration, storm.FailoverRenewDeadline, storm.FailoverRetryPeriod)
			// A dead leader's lease runs out a lease duration after its last
			// renewal, at most a retry period (jittered) before the kill: a
			// takeover sooner would mean two leaders at once.
			Expect(f.TakeoverSeconds).To(BeNumerically(">=", (storm.FailoverLeaseDuration - 2*storm.FailoverRetryPeriod).Seconds()))
		})

		It("ends with every pod acknowledging the new leader's last plan", func() {
			expectRolledOut(f.Run)
		})
	})

	Context("kube-apiserver restarted under load, with a scale-up the moment it is back", Ordered, func() {
		var f *storm.RestartReport
		BeforeAll(func(ctx SpecContext) {
			var err error
			f, err = harness.RunAPIServerRestart(ctx)
			Expect(err).NotTo(HaveOccurred(), "the harness could not run the API server restart scenario, or the manager exited")
			faultsReport.Restart = f
			AddReportEntry("apiserver-restart", fmt.Sprintf("down %.2fs; back → first plan %.2fs, every pod on the plan for 8 pods %.2fs; Ready pods' permits while down %d..%d",
				f.DownSeconds, f.FirstPlanSeconds, f.RecoveredSeconds, f.OutageReadyPermitsMin, f.OutageReadyPermitsMax))
		}, NodeTimeout(2*time.Minute))

		It("keeps every pod on its last good plan while the API server is down", func() {
			Expect(f.OutageSamples).To(BeNumerically(">", 0), "samples taken while the API server was down")
			Expect(f.OutageReadyPermitsMin).To(Equal(storm.Usable()), "the Ready pods' permits never fell")
			Expect(f.OutageReadyPermitsMax).To(Equal(storm.Usable()), "the Ready pods' permits never rose")
			Expect(f.BadPlans).To(BeEmpty(), "gates that fell to zero or beyond the usable total")
		})

		It("keeps the peak in-flight within the contract", func() {
			expectWithinContract(f.Run)
		})

		It("resumes the watches: every pod enforces and acknowledges the plan for the new replica count within the limit", func() {
			Expect(f.Err).To(BeEmpty())
			Expect(f.RecoveredSeconds).To(BeNumerically(">", 0))
			Expect(f.RecoveredSeconds).To(BeNumerically("<=", storm.RestartRecoveryLimit.Seconds()))
			expectRolledOut(f.Run)
		})
	})

	Context("an evicted and a completed pod beside the workload's pods", Ordered, func() {
		var f *storm.FinishedPodsReport
		BeforeAll(func(ctx SpecContext) {
			var err error
			f, err = harness.RunFinishedPods(ctx)
			Expect(err).NotTo(HaveOccurred(), "the harness could not run the finished pods scenario")
			faultsReport.FinishedPods = f
		}, NodeTimeout(2*time.Minute))

		It("divides the usable permits over the Ready pods alone, before and after a scale-up", func() {
			Expect(f.Checkpoints).To(HaveLen(2))
			for i, want := range []int{4, 6} {
				cp := f.Checkpoints[i]
				Expect(cp.Err).To(BeEmpty(), "checkpoint at %.1fs", cp.AtSeconds)
				Expect(cp.ReadyPods).To(Equal(want))
				Expect(cp.ReadyPermits).To(Equal(storm.Usable()), "the Ready pods' permits at %.1fs", cp.AtSeconds)
				Expect(cp.Divisor).To(BeEquivalentTo(want), "status.replicas.divisor at %.1fs", cp.AtSeconds)
				Expect(cp.StatusReadyPods).To(BeEquivalentTo(want))
				// The finished pods still exist: the status sees them, and
				// leaves them out of the division.
				Expect(cp.ExistingPods).To(BeEquivalentTo(want+2), "status.replicas.existingPods at %.1fs", cp.AtSeconds)
				Expect(cp.Usable).To(BeEquivalentTo(storm.Usable()))
				Expect(cp.Base).To(BeEquivalentTo(storm.Usable()/want), "status.division.base at %.1fs", cp.AtSeconds)
				Expect(cp.FinishedNamed).To(BeEmpty())
			}
		})

		It("keeps the peak in-flight within the contract", func() {
			expectWithinContract(f.Run)
		})
	})

	Context("the calling workload a StatefulSet, scaled by the real HPA", Ordered, func() {
		var f *storm.StatefulSetReport
		BeforeAll(func(ctx SpecContext) {
			var err error
			f, err = harness.RunStatefulSet(ctx)
			Expect(err).NotTo(HaveOccurred(), "the harness could not run the StatefulSet scenario")
			faultsReport.StatefulSet = f
			AddReportEntry("statefulset: "+storm.StatefulSetRecreated+" gone and back", fmt.Sprintf("the Ready pods held at least %d permits, below %d for %.1fs",
				f.RecreateReadyPermitsMin, storm.Usable(), f.RecreateBelowUsableSeconds))
			for _, st := range f.Steps {
				AddReportEntry("statefulset: "+st.Name, fmt.Sprintf("at %.1fs; the HPA decided %.2fs later; settled %.2fs after that: %d permits on %d Ready pods, shares %v",
					st.AtSeconds, st.DecidedSeconds, st.SettledSeconds, st.ReadyPermits, st.ReadyPods, st.Shares))
			}
		}, NodeTimeout(2*time.Minute))

		It("follows the HPA's scale-up and scale-down with the pods named by ordinal, dividing every usable permit exactly over the Ready pods", func() {
			Expect(f.Err).To(BeEmpty())
			Expect(f.Steps).To(HaveLen(3))
			for i, want := range []int{storm.StatefulSetUp, storm.StatefulSetUp, storm.StatefulSetDown} {
				st := f.Steps[i]
				Expect(st.Want).To(Equal(want), "step %q", st.Name)
				Expect(st.Err).To(BeEmpty(), "step %q", st.Name)
				var names []string
				for o := range want {
					names = append(names, fmt.Sprintf("%s-%d", storm.WorkloadName, o))
				}
				Expect(st.Pods).To(Equal(names), "step %q: the running pods", st.Name)
				Expect(st.ReadyPods).To(Equal(want), "step %q", st.Name)
				Expect(st.ReadyPermits).To(Equal(storm.Usable()), "step %q: the Ready pods' permits", st.Name)
				// Exact division: every pod the base share or one more.
				base := storm.Usable() / want
				for j, n := range st.Shares {
					Expect(n).To(BeElementOf(base, base+1), "step %q: %s's share", st.Name, st.Pods[j])
				}
			}
			Expect(f.Steps[0].DecidedSeconds).To(BeNumerically(">", 0), "the HPA scaled the StatefulSet up")
			Expect(f.Steps[2].DecidedSeconds).To(BeNumerically(">", 0), "the HPA scaled the StatefulSet down")
			expectRolledOut(f.Run)
		})

		It("creates the pods of the scale-up one at a time, and deletes those of the scale-down from the highest ordinal, as OrderedReady does", func() {
			Expect(f.CreationOrder).To(BeEmpty())
			Expect(f.DeletionOrder).To(BeEmpty())
		})

		It("runs the pod deleted and created again under its name as a new process, once the old one has exited", func() {
			Expect(f.Recreated).To(HaveLen(2))
			old, cur := f.Recreated[0], f.Recreated[1]
			Expect(cur.UID).NotTo(Equal(old.UID))
			Expect(old.Exited).To(BeNumerically(">", 0), "the old process exited")
			Expect(cur.Started).To(BeNumerically(">", old.Exited), "the new process started after the old one exited")
			Expect(cur.Ready).To(BeNumerically(">", 0))
			Expect(cur.Exited).To(BeZero(), "the new process still runs")
		})

		It("keeps the peak in-flight within the contract", func() {
			expectWithinContract(f.Run)
		})

		It("hands over: shares grow only once the shrinking pods acknowledged, so the pods never enforce more than the usable permits together", func() {
			Expect(f.PeakRunningPermits).To(BeNumerically(">", 0))
			Expect(f.PeakRunningPermits).To(BeNumerically("<=", storm.Usable()))
			Expect(f.PeakHeld).To(BeNumerically(">", 0))
			Expect(f.PeakHeld).To(BeNumerically("<=", storm.Usable()), "status.division.held")
		})
	})
})
