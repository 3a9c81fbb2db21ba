//go:build e2e

package e2e_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// The pods of this variant do not use the library: each calls the
// downstream through backpressure-proxy, its sidecar, which must keep the
// contract as the library does.
var _ = Describe("The 429 storm, with pods calling through the sidecar proxy", Ordered, ContinueOnFailure, func() {
	var r *report.VariantReport
	BeforeAll(func(ctx SpecContext) {
		r = runVariant(ctx, storm.ProxyVariantName)
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

	It("ends with every pod's proxy acknowledging the last plan's epoch/revision", func() {
		expectRolledOut(r)
	})
})
