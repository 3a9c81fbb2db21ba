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

// firstCallReport collects the first-call runs' figures for
// _output/storm/report-first-call.json.
var firstCallReport = &storm.FirstCallReport{}

const (
	// firstCallReserveBound is the most a new pod may wait for its first
	// admitted call when it can borrow from the reserve: it gets a call
	// every 1/16 s, and borrows for the first.
	firstCallReserveBound = time.Second
	// firstCallHandoverBound is the most it may wait with pods that
	// acknowledge and no reserve: the operator's plan for one pod more,
	// the pods applying it and acknowledging once their calls fit (a
	// call's latency), and the plan that grants the new pod its share.
	firstCallHandoverBound = 5 * time.Second
	// firstCallDelayLow and firstCallDelaySlack bound the wait with pods
	// that do not acknowledge and no reserve: the unacknowledged delay,
	// counted from the plan that told the others their smaller share, so
	// a little less than the delay from the Ready of the new pod at the
	// least, and the delay plus the plans before and after at the most.
	firstCallDelayLow   = 0.8
	firstCallDelaySlack = 5 * time.Second
)

var _ = Describe("A new pod's first admitted call", Ordered, ContinueOnFailure, func() {
	AfterAll(func() {
		if harness == nil || len(firstCallReport.Runs) == 0 {
			return
		}
		Expect(firstCallReport.WriteJSON(filepath.Join(harness.OutDir, "report-first-call.json"))).To(Succeed())
		Expect(storm.WriteFirstCallTable(GinkgoWriter, firstCallReport)).To(Succeed())
	})

	for _, v := range storm.FirstCallVariants() {
		desc := fmt.Sprintf("%d pods that acknowledge: %t, reserve: %t, then one more", storm.PartialPods, v.Acknowledge, v.Reserve)
		Context(desc, Ordered, func() {
			var r *storm.FirstCallRun
			BeforeAll(func(ctx SpecContext) {
				var err error
				r, err = harness.RunFirstCall(ctx, v)
				Expect(err).NotTo(HaveOccurred(), "the harness could not run the first-call scenario")
				firstCallReport.Runs = append(firstCallReport.Runs, r)
				AddReportEntry("first call, "+v.Name, fmt.Sprintf("first admitted %v after Ready, %d shed before; own share %v after Ready; peak %d, 429s %d",
					storm.SecondsOrNone(r.FirstAdmittedSeconds), r.ShedBefore, storm.SecondsOrNone(r.GrantedSeconds), r.PeakInFlight, r.Downstream429))
			}, NodeTimeout(2*time.Minute))

			It("sent the new pod its calls, each answered by the downstream or a fallback", func() {
				Expect(r.NewPodCalls).To(BeNumerically(">", 50))
				Expect(r.NewPodFailed).To(BeZero())
				Expect(r.FirstAdmittedSeconds).NotTo(BeNil(), "no call of the new pod admitted within %.0fs of its Ready", r.MeasuredSeconds)
			})

			It("keeps the downstream's peak in flight within the usable permits, and no 429", func() {
				Expect(r.PeakInFlight).To(BeNumerically("<=", storm.Usable()))
				Expect(r.Downstream429).To(BeZero())
			})

			switch {
			case v.Reserve:
				It("admits the new pod's first call within a second", func() {
					Expect(r.FirstAdmittedSeconds).NotTo(BeNil())
					Expect(*r.FirstAdmittedSeconds).To(BeNumerically("<", firstCallReserveBound.Seconds()))
					if !v.Acknowledge {
						// Its own share comes only after the delay: the call was
						// admitted on a borrowed permit. (With acknowledgements
						// the share may come as fast as the first borrow.)
						if r.GrantedSeconds != nil {
							Expect(*r.GrantedSeconds).To(BeNumerically(">", *r.FirstAdmittedSeconds))
						}
					}
				})
			case v.Acknowledge:
				It("admits the new pod's first call once the handover granted it its share, within a few seconds", func() {
					Expect(r.FirstAdmittedSeconds).NotTo(BeNil())
					Expect(*r.FirstAdmittedSeconds).To(BeNumerically("<", firstCallHandoverBound.Seconds()))
					Expect(r.GrantedSeconds).NotTo(BeNil())
				})
			default:
				It("has the new pod shed every call for about the unacknowledged delay", func() {
					delay := storm.FirstCallUnacknowledgedDelay
					Expect(r.FirstAdmittedSeconds).NotTo(BeNil())
					Expect(*r.FirstAdmittedSeconds).To(BeNumerically(">=", firstCallDelayLow*delay.Seconds()))
					Expect(*r.FirstAdmittedSeconds).To(BeNumerically("<=", (delay + firstCallDelaySlack).Seconds()))
					Expect(r.GrantedSeconds).NotTo(BeNil())
					Expect(*r.GrantedSeconds).To(BeNumerically(">=", firstCallDelayLow*delay.Seconds()))
					// About one call in 9 of the load went to it meanwhile.
					Expect(float64(r.ShedBefore)).To(BeNumerically(">=", firstCallDelayLow*delay.Seconds()*r.CallsPerSecond/float64(r.Pods+1)/2))
				})
			}
		})
	}
})
