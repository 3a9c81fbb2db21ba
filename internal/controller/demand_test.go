package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/demand"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// demandSource plays the custom metrics API for the suite: each namespace's
// pods' demand, or why it cannot be read, and the reads it was asked for.
type demandSource struct {
	mu     sync.Mutex
	values map[string]map[string]int64
	errs   map[string]error
	reads  map[string][]string
}

// testDemand is the suite's demand source.
var testDemand = &demandSource{values: map[string]map[string]int64{}, errs: map[string]error{}, reads: map[string][]string{}}

func (s *demandSource) Read(_ context.Context, ns string, sel labels.Selector, metric string) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[ns] = append(s.reads[ns], metric+" "+sel.String())
	if err := s.errs[ns]; err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for pod, v := range s.values[ns] {
		out[pod] = v
	}
	return out, nil
}

func (s *demandSource) set(ns string, values map[string]int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[ns], s.errs[ns] = values, err
}

func (s *demandSource) readsOf(ns string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reads[ns]...)
}

// demandFollowing returns q's DemandFollowing condition, failing when
// there is none.
func demandFollowing(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionDemandFollowing)
	g.Expect(c).NotTo(BeNil(), "quota %s has no DemandFollowing condition", q.Name)
	return *c
}

// nextInterval lets the demand interval pass and reconciles the quota, as
// its requeue would, once no reconcile from before is left to write.
func nextInterval(ctx SpecContext, ns string) {
	advanceIdle(DefaultDemandInterval)
	reconcileFresh(ctx, ns, "logistics")
}

// demandWorld makes a namespace with a Deployment gateway of 4 Ready pods
// whose demand source answers values or err, and a quota logistics of 50
// (40 usable) whose shares follow metric ("" for the default); it returns
// the namespace, the pods and the model of what they may enforce.
func demandWorld(ctx SpecContext, metric string, values map[string]int64, err error) (string, []*corev1.Pod, *inFlightModel) {
	ns := newNamespace(ctx)
	Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 4))).To(Succeed())
	pods := createReadyPods(ctx, ns, "gateway", 4)
	waitCached(ctx, ns, "gateway", 4, 4)
	testDemand.set(ns, values, err)
	model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
	Expect(k8s.Create(ctx, builders.MakeQuota(ns, "logistics").Workload("Deployment", "gateway").Concurrency(50).
		Shares(v1alpha1.SharesDemand, metric).Obj())).To(Succeed())
	return ns, pods, model
}

var _ = Describe("Shares that follow demand", func() {
	gateways := []string{"gateway-00", "gateway-01", "gateway-02", "gateway-03"}

	It("divide the pods' part by water-filling over their demand, keep it within the band, and move it through the handover", func(ctx SpecContext) {
		ns, pods, model := demandWorld(ctx, "", map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}, nil)

		// 40 usable: 1 each (the floor), then 36 over the demands above
		// it, 19 + 9 + 1 + 0 = 29, each met; the surplus 7 evenly, 1 each
		// and one more to the first three by name.
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 22, "gateway-01": 12, "gateway-02": 4, "gateway-03": 2}))
			q := getQuota(ctx, g, ns, "logistics")
			c := demandFollowing(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDemandFollowed))
			g.Expect(c.Message).To(Equal("the pods' shares follow Pods metric backpressure_gate_demand_in_flight, read every 15s; 4 of 4 Ready pods measured"))
			g.Expect(q.Status.PodPermits).To(Equal("2-22"))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(10), "the mean share")
			div := divisionOf(g, q)
			g.Expect(div.Shares).To(Equal([]v1alpha1.ShareCount{{Permits: 22, Pods: 1}, {Permits: 12, Pods: 1}, {Permits: 4, Pods: 1}, {Permits: 2, Pods: 1}}))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)
		// However often the quota is reconciled within an interval, its
		// demand is read once.
		Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(getQuota(ctx, g, ns, "logistics").Status.Conditions, v1alpha1.ConditionPlanApplied)
			g.Expect(c).To(HaveValue(HaveField("Status", metav1.ConditionTrue)))
		}).Should(Succeed())
		Expect(testDemand.readsOf(ns)).To(Equal([]string{"backpressure_gate_demand_in_flight app=gateway"}))
		revision := divisionOf(Default, getQuota(ctx, Default, ns, "logistics")).Revision

		// Within the band (fresh targets 23, 12, 3, 2: no pod off by more
		// than max(1, a quarter of its target)): nothing moves.
		testDemand.set(ns, map[string]int64{"gateway-00": 21, "gateway-01": 11, "gateway-02": 2, "gateway-03": 0}, nil)
		nextInterval(ctx, ns)
		Expect(testDemand.readsOf(ns)).To(HaveLen(2))
		Consistently(func(g Gomega) {
			g.Expect(divisionOf(g, getQuota(ctx, g, ns, "logistics")).Revision).To(Equal(revision))
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 22, "gateway-01": 12, "gateway-02": 4, "gateway-03": 2}))
		}, "1s").Should(Succeed())

		// Beyond it: claims 29, 29, 1, 0 over 36 fill to 17.5 each for the
		// first two (18 to the first by name), so 19, 18, 2, 1. The
		// shrinking pods are told at once; gateway-01 grows only as they
		// acknowledge. Nothing here reconciles the quota: the demand watch
		// reads the demand once the interval has passed and wakes it.
		testDemand.set(ns, map[string]int64{"gateway-00": 30, "gateway-01": 30, "gateway-02": 2, "gateway-03": 0}, nil)
		advance(DefaultDemandInterval)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 19, "gateway-01": 12, "gateway-02": 2, "gateway-03": 1}))
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(shareOf(divisionOf(g, q), "gateway-01").Target).To(HaveValue(BeEquivalentTo(18)))
			g.Expect(handedOver(g, q).Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "gateway-01")).To(Equal(map[string]int{"gateway-01": 12}))
		}, "1s").Should(Succeed())
		model.acknowledge(ctx, pods...)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 19, "gateway-01": 18, "gateway-02": 2, "gateway-03": 1}))
			g.Expect(getQuota(ctx, g, ns, "logistics").Status.PodPermits).To(Equal("1-19"))
		}).Should(Succeed())
		Expect(model.verify()).To(BeNumerically("<=", 40))
	})

	It("divide equally and say why while no demand can be read, and follow it once it can", func(ctx SpecContext) {
		ns, pods, model := demandWorld(ctx, "requests_in_flight", nil, fmt.Errorf("%w: no custom metrics API (custom.metrics.k8s.io) registered", demand.ErrUnavailable))

		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 10, "gateway-01": 10, "gateway-02": 10, "gateway-03": 10}))
			c := demandFollowing(g, getQuota(ctx, g, ns, "logistics"))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDemandUnavailable))
			g.Expect(c.Message).To(Equal("cannot read Pods metric requests_in_flight: demand unavailable: no custom metrics API (custom.metrics.k8s.io) registered; the pods' part is divided equally until it can be"))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)

		// One pod measured, the others not yet: they claim without a cap.
		testDemand.set(ns, map[string]int64{"gateway-03": 4}, nil)
		nextInterval(ctx, ns)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			c := demandFollowing(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(HaveSuffix("1 of 4 Ready pods measured (the others claim without a cap, as under equal shares)"))
			// 1 each, then 36: gateway-03 capped at 3 more, 33 over the
			// other three.
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 10, "gateway-01": 10, "gateway-02": 10, "gateway-03": 4}))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 12, "gateway-01": 12, "gateway-02": 12, "gateway-03": 4}))
		}).Should(Succeed())

		// Back to equal shares: the condition says so, and gateway-03 gets
		// its 10 as the others let go of theirs.
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			q.Spec.Shares = &v1alpha1.Shares{Policy: v1alpha1.SharesEqual}
			g.Expect(k8s.Update(ctx, q)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			c := demandFollowing(g, getQuota(ctx, g, ns, "logistics"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonEqualShares))
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 10, "gateway-01": 10, "gateway-02": 10, "gateway-03": 4}))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "gateway-03")).To(Equal(map[string]int{"gateway-03": 10}))
		}).Should(Succeed())
		Expect(model.verify()).To(BeNumerically("<=", 40))
	})

	It("follow the last reading for a minute while reads fail, then divide equally", func(ctx SpecContext) {
		ns, pods, model := demandWorld(ctx, "", map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}, nil)
		followed := map[string]int{"gateway-00": 22, "gateway-01": 12, "gateway-02": 4, "gateway-03": 2}
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(followed))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)
		revision := divisionOf(Default, getQuota(ctx, Default, ns, "logistics")).Revision

		// The adapter goes away: three intervals later the shares still
		// follow the last reading, and nothing is published.
		testDemand.set(ns, nil, fmt.Errorf("%w: the server is currently unable to handle the request", demand.ErrUnavailable))
		for range demandKeep - 1 {
			nextInterval(ctx, ns)
			Eventually(func(g Gomega) {
				c := demandFollowing(g, getQuota(ctx, g, ns, "logistics"))
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDemandStale))
				g.Expect(c.Message).To(HavePrefix("cannot read Pods metric backpressure_gate_demand_in_flight: demand unavailable: " +
					"the server is currently unable to handle the request; the pods' shares follow the reading of "))
			}).Should(Succeed())
			Expect(divisionOf(Default, getQuota(ctx, Default, ns, "logistics")).Revision).To(Equal(revision))
			Expect(shares(ctx, Default, ns, gateways...)).To(Equal(followed))
		}

		// A minute after the last reading: equal shares, moved through the
		// handover (the shrinking pods are told at once).
		nextInterval(ctx, ns)
		Eventually(func(g Gomega) {
			c := demandFollowing(g, getQuota(ctx, g, ns, "logistics"))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDemandUnavailable))
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 10, "gateway-01": 10, "gateway-02": 4, "gateway-03": 2}))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateways...)).To(Equal(map[string]int{"gateway-00": 10, "gateway-01": 10, "gateway-02": 10, "gateway-03": 10}))
		}).Should(Succeed())
		Expect(model.verify()).To(BeNumerically("<=", 40))
	})

	It("divide a sharing caller's part of a contract by its pods' demand, the other caller's part staying equal", func(ctx SpecContext) {
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		dc := sharedContract(ctx, nsA, 60) // 48 usable: 24 for each caller
		var podsA []*corev1.Pod
		for _, ns := range []string{nsA, nsB} {
			Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
			n := map[string]int{nsA: 4, nsB: 2}[ns]
			pods := createReadyPods(ctx, ns, "api", n)
			if ns == nsA {
				podsA = pods
			}
			waitCached(ctx, ns, "api", n, n)
		}
		testDemand.set(nsA, map[string]int64{"api-00": 20, "api-01": 4, "api-02": 0, "api-03": 0}, nil)
		model := watchInFlight(ctx, nsA, "api-backpressure", "payments", 48)
		a := sharingQuota(nsA, "payments", dc, 0)
		a.Spec.Shares = &v1alpha1.Shares{Policy: v1alpha1.SharesDemand}
		Expect(k8s.Create(ctx, a)).To(Succeed())
		Expect(k8s.Create(ctx, sharingQuota(nsB, "payments", dc, 0))).To(Succeed())

		// A's 24: 1 each (the floor), then 20 over the demands above it,
		// 19 and 3: max-min gives 17 and 3. B's 24 over its 2 pods: 12
		// each. A's pods let go of what they held before B came first.
		Eventually(func(g Gomega) { publishedDocument(ctx, g, nsA, "api-backpressure", "payments") }).Should(Succeed())
		Eventually(func(g Gomega) {
			model.acknowledge(ctx, podsA...)
			doc, _ := publishedDocument(ctx, g, nsA, "api-backpressure", "payments")
			g.Expect([]int{doc.For("api-00").Permits, doc.For("api-01").Permits, doc.For("api-02").Permits, doc.For("api-03").Permits}).To(Equal([]int{18, 4, 1, 1}))
			docB, _ := publishedDocument(ctx, g, nsB, "api-backpressure", "payments")
			g.Expect([]int{docB.For("api-00").Permits, docB.For("api-01").Permits}).To(Equal([]int{12, 12}))
			c := demandFollowing(g, getQuota(ctx, g, nsA, "payments"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonDemandFollowed))
			g.Expect(meta.FindStatusCondition(getQuota(ctx, g, nsB, "payments").Status.Conditions, v1alpha1.ConditionDemandFollowing)).To(BeNil())
		}).Should(Succeed())
		Expect(testDemand.readsOf(nsB)).To(BeEmpty(), "B's shares are equal: its demand is never read")

		// A's demand moves beyond the band: once the interval has passed
		// the demand watch wakes the contract, which no event would have:
		// 1 each, then 20 over the claims above it, 3 and 19: 3 and 17.
		testDemand.set(nsA, map[string]int64{"api-00": 4, "api-01": 20, "api-02": 0, "api-03": 0}, nil)
		advance(DefaultDemandInterval)
		Eventually(func(g Gomega) {
			model.acknowledge(ctx, podsA...)
			doc, _ := publishedDocument(ctx, g, nsA, "api-backpressure", "payments")
			g.Expect([]int{doc.For("api-00").Permits, doc.For("api-01").Permits, doc.For("api-02").Permits, doc.For("api-03").Permits}).To(Equal([]int{4, 18, 1, 1}))
		}).Should(Succeed())
		Expect(testDemand.readsOf(nsB)).To(BeEmpty(), "B's shares are equal: its demand is never read")
		Expect(model.verify()).To(BeNumerically("<=", 48))

		// The contract is deleted: A reports it missing, also when a
		// contract step that began before the deletion writes A's status
		// after the deletion's reconcile, and the demand watch no longer
		// reads A's demand, whatever time passes.
		Expect(k8s.Delete(ctx, dc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ready(g, getQuota(ctx, g, nsA, "payments")).Reason).To(Equal(v1alpha1.ReasonContractNotFound))
		}).Should(Succeed())
		Eventually(func() []string {
			before := testDemand.readsOf(nsA)
			advance(DefaultDemandInterval)
			time.Sleep(4 * DefaultDemandInterval / demandPollsPerInterval)
			return testDemand.readsOf(nsA)[len(before):]
		}).Should(BeEmpty(), "A's demand is still read once its contract is gone")
		n := len(testDemand.readsOf(nsA))
		for range 3 {
			advance(DefaultDemandInterval)
			time.Sleep(4 * DefaultDemandInterval / demandPollsPerInterval)
		}
		Expect(testDemand.readsOf(nsA)).To(HaveLen(n), "A's demand is read again once its contract is gone")
	})
})
