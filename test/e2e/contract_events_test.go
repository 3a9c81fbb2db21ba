//go:build e2e

package e2e_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
)

var _ = Describe("A shared contract's callers through three mid-run events", Ordered, ContinueOnFailure, func() {
	var r *storm.ContractEventsReport
	BeforeAll(func(ctx SpecContext) {
		var err error
		r, err = harness.RunContractEvents(ctx)
		Expect(err).NotTo(HaveOccurred(), "the harness could not run the shared-contract events scenario")
		Expect(r.WriteJSON(filepath.Join(harness.OutDir, "report-shared-contract-events.json"))).To(Succeed())
		for _, e := range r.Events {
			var plans []string
			for _, p := range e.Plans {
				plans = append(plans, fmt.Sprintf("%s %.2fs (seen %t, before the next event %t)", p.Quota, p.AfterSeconds, p.Seen, p.BeforeNext))
			}
			AddReportEntry("shared-contract events: "+e.Name, fmt.Sprintf("at %.1fs; first new document: %s", e.AtSeconds, strings.Join(plans, ", ")))
		}
		AddReportEntry("shared-contract events", fmt.Sprintf("%d downstream 429s, peak in-flight %d", r.Run.Downstream429, r.Run.PeakInFlight))
	}, NodeTimeout(2*time.Minute))

	It("keeps the shared downstream's peak in-flight within the contract, with no 429, and the quotas' documents within the usable permits", func() {
		expectEventsGoals(r, "peak in-flight", "downstream 429s", "the documents the quotas told")
	})

	It("publishes every quota of the contract a new document within 10 s of the second quota joining, and of a caller's namespace turned away", func() {
		Expect(storm.EventPlanBound).To(Equal(10 * time.Second))
		Expect(expectEventsGoals(r, "three events happened", "after second quota", "after turned away")).To(Equal(1+3+3), "one goal per event and quota")
	})

	It("rebuilds a deleted status.division, its documents restarting above the revisions published before", func() {
		Expect(expectEventsGoals(r, "after division deleted:", "the contract's status.division")).To(Equal(2 + 1))
	})

	It("ends with the turned-away caller told 0 and its pods enforcing 0, the search gateway's two quotas at 20 each", func() {
		expectEventsGoals(r, "the turned-away caller", "the search gateway", "storm-events-")
	})
})

// expectEventsGoals asserts every asserted goal of the shared-contract
// events scenario whose name starts with one of prefixes, and returns how
// many there were; there must be at least one.
func expectEventsGoals(r *storm.ContractEventsReport, prefixes ...string) int {
	GinkgoHelper()
	Expect(r).NotTo(BeNil())
	n := 0
	for _, g := range r.Goals {
		for _, p := range prefixes {
			if g.Asserted && strings.HasPrefix(g.Goal, p) {
				n++
				Expect(g.Met).To(BeTrue(), "%s: want %s, got %s", g.Goal, g.Want, g.Got)
				break
			}
		}
	}
	Expect(n).To(BeNumerically(">", 0), "no goal starts with %q", prefixes)
	return n
}
