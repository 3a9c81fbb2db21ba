package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// sharingCaller creates the quota "payments" in ns over the Deployment
// workload that shares the contract named contract.
func sharingCaller(ctx context.Context, ns, workload, contract, downstream string) *v1alpha1.DownstreamQuota {
	q := &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments"},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: workload},
			Downstream:  downstream,
			ContractRef: &v1alpha1.ContractReference{Name: contract},
			Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
			Deadline:    metav1.Duration{Duration: time.Second},
		},
	}
	Expect(k8s.Create(ctx, q)).To(Succeed())
	return q
}

var _ = Describe("What a sharing caller's status says", func() {
	It("is Ready, without a Warning, while its workload has no Ready pod, as a quota with its own contract is", func(ctx SpecContext) {
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		dc := sharedContract(ctx, nsA, 50)
		// The nightly job, scaled to nothing, is there first.
		Expect(k8s.Create(ctx, newDeployment(nsB, "report", 0))).To(Succeed())
		sharingCaller(ctx, nsB, "report", dc.Name, dc.Spec.Downstream)
		Expect(k8s.Create(ctx, newDeployment(nsA, "search", 1))).To(Succeed())
		readyPod(ctx, nsA, "search", "search-0")
		sharingCaller(ctx, nsA, "search", dc.Name, dc.Spec.Downstream)

		Consistently(func(g Gomega) {
			q := getQuota(ctx, g, nsB, "payments")
			if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady); c != nil {
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "a caller with no Ready pod: %+v", c)
			}
			g.Expect(warnings(ctx, g, nsB, "payments", v1alpha1.ReasonQuotaTooSmall)).To(BeEmpty())
		}).WithTimeout(3 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ready(g, getQuota(ctx, g, nsB, "payments")).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
	})

	It("names the other callers' pods as <namespace>/<pod> in the handover's message, and never an empty list", func(ctx SpecContext) {
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		dc := sharedContract(ctx, nsA, 50)
		Expect(k8s.Create(ctx, newDeployment(nsA, "search", 2))).To(Succeed())
		Expect(k8s.Create(ctx, newDeployment(nsB, "report", 2))).To(Succeed())
		a0, a1 := readyPod(ctx, nsA, "search", "search-0"), readyPod(ctx, nsA, "search", "search-1")
		b0, b1 := readyPod(ctx, nsB, "report", "report-0"), readyPod(ctx, nsB, "report", "report-1")
		qa := sharingCaller(ctx, nsA, "search", dc.Name, dc.Spec.Downstream)
		qb := sharingCaller(ctx, nsB, "report", dc.Name, dc.Spec.Downstream)
		// Everyone acknowledges the even split, 10 each.
		Eventually(func(g Gomega) {
			got := getContract(ctx, g, dc.Name)
			g.Expect(got.Status.Division).NotTo(BeNil())
			current := fmt.Sprintf("%s/%d", got.UID, got.Status.Division.Revision)
			ackShared(ctx, qa.Name, current, a0, a1)
			ackShared(ctx, qb.Name, current, b0, b1)
			g.Expect(handedOver(g, getQuota(ctx, g, nsA, qa.Name)).Status).To(Equal(metav1.ConditionTrue))
			d := getContract(ctx, g, dc.Name).Status.Division
			g.Expect(heldBy(d)).To(BeEquivalentTo(40))
			// Both callers in the division: the report's pods may not
			// have joined yet when the search's hold all 40.
			g.Expect(d.Pods).To(HaveLen(4))
			for _, p := range d.Pods {
				g.Expect(p.Permits).To(BeEquivalentTo(10), "pod %s", p.Name)
			}
		}).Should(Succeed())

		// The report's pods stop being Ready and do not acknowledge: the
		// search's pods wait for them.
		setNotReady(ctx, b0, b1)
		Eventually(func(g Gomega) {
			a := handedOver(g, getQuota(ctx, g, nsA, qa.Name))
			b := handedOver(g, getQuota(ctx, g, nsB, qb.Name))
			g.Expect(a.Reason).To(Equal(v1alpha1.ReasonHandoverInProgress), "search: %s; report: %s", a.Message, b.Message)
			g.Expect(a.Message).To(ContainSubstring(nsB+"/report-0"), "search's message names the pods it waits for with their namespace")
			g.Expect(b.Message).To(ContainSubstring(nsA+"/search-0"), "report's message names the pods waiting for its own with their namespace")
			for _, m := range []string{a.Message, b.Message} {
				g.Expect(m).NotTo(ContainSubstring("pods  "), "an empty list of pods")
				g.Expect(m).NotTo(HavePrefix("no pods wait"))
			}
		}).Should(Succeed())
	})
})

var _ = Describe("ContractOversubscribed", func() {
	It("does not count a quota that publishes nothing, its workload missing", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 1))).To(Succeed())
		readyPod(ctx, ns, "api", "api-0")
		downstream := "ghost-" + ns + ".example.com"
		one := newQuota(ns, "one", "api", 50) // 40 of 50
		one.Spec.Downstream = downstream
		Expect(k8s.Create(ctx, one)).To(Succeed())
		ghost := newQuota(ns, "ghost", "nothing-here", 50) // would be 80 of 50
		ghost.Spec.Downstream = downstream
		Expect(k8s.Create(ctx, ghost)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ready(g, getQuota(ctx, g, ns, "ghost")).Reason).To(Equal(v1alpha1.ReasonWorkloadNotFound))
			g.Expect(ready(g, getQuota(ctx, g, ns, "one")).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "one"))
			g.Expect(c.Reason).NotTo(Equal(v1alpha1.ReasonContractOversubscribed), "40 published permits of a contract of 50: %s", c.Message)
		}).WithTimeout(3 * time.Second).Should(Succeed())
	})
})

var _ = Describe("PERMITS/POD", func() {
	It("is 0 while no pod of the workload is Ready: no pod holds 40", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 8))).To(Succeed())
		Expect(k8s.Create(ctx, newQuota(ns, "logistics", "api", 50))).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Replicas).NotTo(BeNil())
			g.Expect(q.Status.Replicas.Divisor).To(BeEquivalentTo(0))
			g.Expect(q.Status.PerPod).NotTo(BeNil())
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(0))
			g.Expect(permitsColumn(ctx, g, ns, "logistics")).To(Equal("0"), "the printer column PERMITS/POD")
		}).Should(Succeed())
	})

	It("says what the Ready pods are told during a handover, 0-20 while the new pod waits, and fires no event for the handover's steps", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		silent := createReadyPods(ctx, ns, "api", 1)[0] // it never acknowledges
		joining := createPod(ctx, ns, "api", "api-01")
		waitCached(ctx, ns, "api", 2, 1)
		q := newQuota(ns, "payments", "api", 50) // 40 usable
		q.Spec.Handover = v1alpha1.Handover{UnacknowledgedDelay: &metav1.Duration{Duration: 2 * time.Second}}
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) string { return permitsColumn(ctx, g, ns, "payments") }).Should(Equal("40"))

		By("a second pod turns Ready: the first is told 20 at once, the second waits at 0 for the first's old share")
		setReady(ctx, joining)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			div := divisionOf(g, q)
			g.Expect(shareOf(div, joining.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeZero(), "Target": HaveValue(BeEquivalentTo(20))}))
			g.Expect(shareOf(div, silent.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeEquivalentTo(20), "Holds": HaveValue(BeEquivalentTo(40))}))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(20), "perPod.permits stays the base share")
			g.Expect(permitsColumn(ctx, g, ns, "payments")).To(Equal("0-20"))
			// The delay counts from when the operator's cache holds the
			// smaller share published; the clock is about to move.
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.For(silent.Name).Permits).To(Equal(20))
			cached := &corev1.ConfigMap{}
			g.Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api-backpressure"}, cached)).To(Succeed())
			seen, err := plan.Parse([]byte(cached.Data[plan.KeyFor("payments")]))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(seen.Revision).To(Equal(doc.Revision))
		}).Should(Succeed())
		Consistently(func(g Gomega) string { return permitsColumn(ctx, g, ns, "payments") }).WithTimeout(500 * time.Millisecond).Should(Equal("0-20"))

		By("once the unacknowledged delay has passed, both pods are told 20")
		advanceIdle(2 * time.Second)
		reconcileFresh(ctx, ns, "payments")
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(shareOf(divisionOf(g, q), joining.Name).Permits).To(BeEquivalentTo(20))
			g.Expect(permitsColumn(ctx, g, ns, "payments")).To(Equal("20"))
		}).Should(Succeed())

		// The events compare the base share: the divisor's change is one
		// event, and the step that grants the waiting pod its 20 is none.
		planChanges := func(g Gomega) []string {
			var out []string
			for _, n := range notes(quotaEvents(ctx, g, ns, "payments")) {
				if strings.HasPrefix(n, EventReasonPlanChanged+":") {
					out = append(out, n)
				}
			}
			return out
		}
		want := []string{
			"PlanChanged: permits 40 per pod: Ready pods 1; 40 usable permits = 40 × 1 + 0; published to ConfigMap api-backpressure",
			"PlanChanged: permits 40→20 per pod: Ready pods 1→2; 40 usable permits = 20 × 2 + 0",
		}
		Eventually(planChanges).Should(Equal(want))
		Consistently(planChanges).WithTimeout(time.Second).Should(Equal(want))
	})
})

// permitsColumn returns the PERMITS/POD cell of the quota as kubectl get
// shows it: from the table the API server renders with the CRD's printer
// columns.
func permitsColumn(ctx context.Context, g Gomega, ns, name string) string {
	rc, err := rest.RESTClientFor(tableConfig())
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := rc.Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", ns, "downstreamquotas", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	var table metav1.Table
	g.Expect(json.Unmarshal(raw, &table)).To(Succeed())
	col := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Permits/Pod" })
	g.Expect(col).To(BeNumerically(">=", 0), "no column Permits/Pod in %v", table.ColumnDefinitions)
	g.Expect(table.Rows).To(HaveLen(1))
	cell := table.Rows[0].Cells[col]
	if cell == nil {
		return "<none>"
	}
	return fmt.Sprint(cell)
}

// tableConfig is the tests' client configuration for a raw request.
func tableConfig() *rest.Config {
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(k8s.Scheme()).WithoutConversion()
	return cfg
}
