//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
)

// suiteTimeout bounds the whole suite: set-up, three variants of about 70
// seconds each, and teardown.
const suiteTimeout = 9 * time.Minute

var (
	harness  *storm.Harness
	schedule storm.Schedule
	variants map[string]storm.Variant
	report   *storm.Report
)

func TestStorm(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.Timeout = suiteTimeout
	RunSpecs(t, "The 429 storm, end to end", suiteConfig, reporterConfig)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctrllog.SetLogger(logr.Discard())
	var err error
	schedule, err = storm.ScheduleFromEnv()
	Expect(err).NotTo(HaveOccurred())
	all, err := storm.Variants(schedule)
	Expect(err).NotTo(HaveOccurred())
	variants = map[string]storm.Variant{}
	for _, v := range all {
		variants[v.Name] = v
	}
	report = storm.NewReport(schedule)

	harness, err = storm.Setup(ctx, storm.Options{Logf: func(format string, args ...any) {
		GinkgoWriter.Printf(time.Now().Format("15:04:05 ")+format+"\n", args...)
	}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(harness.Close)
}, NodeTimeout(4*time.Minute))

var _ = AfterSuite(func() {
	if report == nil || len(report.Order) == 0 || harness == nil {
		return
	}
	Expect(report.WriteJSON(filepath.Join(harness.OutDir, "report.json"))).To(Succeed())
	Expect(storm.WritePlot(report, filepath.Join(harness.OutDir, "storm.png"))).To(Succeed())
	Expect(storm.WriteTable(GinkgoWriter, report)).To(Succeed())
})

// runVariant runs a variant and adds it to the report.
func runVariant(ctx context.Context, name string) *storm.VariantReport {
	r, err := harness.Run(ctx, variants[name], schedule)
	Expect(err).NotTo(HaveOccurred(), "the harness could not run the %s variant", name)
	report.Add(r)
	AddReportEntry(name, fmt.Sprintf("%d downstream 429s (%.1f%%), peak in-flight %d, goodput %.1f/s, load %.0f/s of %.0f/s",
		r.Downstream429, 100*r.Downstream429Fraction, r.PeakInFlight, r.GoodputPerSecond, r.Load.AchievedPerSecond, r.Load.TargetPerSecond))
	return r
}

var _ = Describe("The 429 storm", Ordered, func() {
	Context("with the operator", Ordered, func() {
		var r *storm.VariantReport
		BeforeAll(func(ctx SpecContext) {
			r = runVariant(ctx, "operator")
		}, NodeTimeout(3*time.Minute))

		It("sends the downstream not a single call beyond its contract", func() {
			Expect(r.Downstream429).To(BeZero(), "downstream 429s")
		})

		It("keeps the peak in-flight at or below the contract through every scale step", func() {
			for _, p := range r.Phases {
				Expect(p.PeakInFlight).To(BeNumerically("<=", storm.Contract), "peak in-flight in phase %q", p.Name)
			}
			Expect(r.PeakInFlight).To(BeNumerically("<=", storm.Contract))
		})

		It("reaches 90% of the goodput ceiling in the steady phases", func() {
			ceiling := storm.GoodputCeiling()
			steady := 0
			for _, p := range r.Phases {
				if !p.Steady {
					continue
				}
				steady++
				Expect(p.MeasuredSeconds).To(BeNumerically(">", 0), "phase %q is shorter than its settle time", p.Name)
				Expect(p.GoodputPerSecond).To(BeNumerically(">=", storm.GoodputGoalFraction*ceiling),
					"goodput in phase %q against the ceiling %.1f/s", p.Name, ceiling)
			}
			Expect(steady).To(Equal(2))
		})

		It("brings every running pod a new plan within a second (p99)", func() {
			Expect(r.ReloadLatencySeconds).NotTo(BeNil())
			// Every scale step while pods run is a new plan for each of them.
			Expect(r.ReloadLatencySeconds.Count).To(BeNumerically(">=", int(schedule.InitialReplicas)), "reloads observed")
			Expect(r.ReloadLatencySeconds.P99).To(BeNumerically("<", storm.ReloadP99Goal), "reload latency p99 in seconds")
		})

		It("ends with every pod acknowledging the last plan", func() {
			Expect(r.Rollout).NotTo(BeNil())
			Expect(r.Rollout.Current).To(BeTrue(), "the quota's rollout is about the last plan")
			Expect(r.Rollout.StalePods).To(BeZero(), "pods whose last applied plan is not the last one")
			Expect(r.Rollout.Acknowledged).To(Equal(r.Rollout.Total))
			Expect(r.Rollout.Total).To(Equal(schedule.ReplicasAt(schedule.Duration)))
		})

		It("published at the start the share that the static variant freezes", func() {
			static, err := storm.StaticPlan(schedule.InitialReplicas)
			Expect(err).NotTo(HaveOccurred())
			Expect(r.Plans).NotTo(BeEmpty())
			Expect(r.Plans[0].Permits).To(Equal(static.Permits))
			Expect(r.Plans[0].Hash).To(Equal(static.Hash))
		})
	})

	Context("with a static share for 8 pods", Ordered, func() {
		var r *storm.VariantReport
		BeforeAll(func(ctx SpecContext) {
			r = runVariant(ctx, "static")
		}, NodeTimeout(3*time.Minute))

		It("runs the same schedule, and its 429s past 8 pods are reported", func() {
			Expect(r.Load.Sent).To(BeNumerically(">", 0))
			var past8 int64
			for _, p := range r.Timeline {
				if p.Desired > schedule.InitialReplicas {
					past8 += p.Rejected429
				}
			}
			AddReportEntry("static: 429s while scaled past 8 pods", past8)
			Expect(r.StaticPermits).To(BeNumerically(">", 0))
		})
	})

	Context("with the naive full contract per pod and a retry on 429", Ordered, func() {
		var r *storm.VariantReport
		BeforeAll(func(ctx SpecContext) {
			r = runVariant(ctx, "naive")
		}, NodeTimeout(3*time.Minute))

		It("shows the storm: the downstream answers 429", func() {
			Expect(r.Downstream429).To(BeNumerically(">", 0))
		})
	})
})
