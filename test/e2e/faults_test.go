//go:build e2e

package e2e_test

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
)

// faultsReport collects the fault scenarios' figures for
// _output/storm/report-faults.json.
var faultsReport = &storm.FaultsReport{}

// expectWithinContract asserts that a fault scenario's run sent the
// downstream no call beyond its contract.
func expectWithinContract(r *storm.VariantReport) {
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
})
