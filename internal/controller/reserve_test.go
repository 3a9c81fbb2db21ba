package controller

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// reserveQuota returns a quota of 50 at 80 % (40 usable) over Deployment
// gateway, with a reserve of permits lent by Deployment broker.
func reserveQuota(ns string, permits intstr.IntOrString) *v1alpha1.DownstreamQuota {
	return builders.MakeQuota(ns, "logistics").Workload("Deployment", "gateway").Concurrency(50).Reserve(permits, "broker").Obj()
}

// createBrokers creates two Ready pods of Deployment broker that declare
// they acknowledge plans, as backpressure-broker does.
func createBrokers(ctx SpecContext, ns string) []*corev1.Pod {
	pods := createReadyPods(ctx, ns, "broker", 2)
	for _, pod := range pods {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Annotations = map[string]string{v1alpha1.AcknowledgesAnnotation: "true"}
		Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())
	}
	return pods
}

// reserved returns q's Reserved condition, failing when there is none.
func reserved(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReserved)
	g.Expect(c).NotTo(BeNil(), "quota %s has no Reserved condition", q.Name)
	return *c
}

// shares returns what the published document tells each of names.
func shares(ctx SpecContext, g Gomega, ns string, names ...string) map[string]int {
	doc, _ := publishedDocument(ctx, g, ns, "gateway-backpressure", "logistics")
	out := map[string]int{}
	for _, n := range names {
		out[n] = doc.For(n).Permits
	}
	return out
}

var _ = Describe("A quota's reserve", func() {
	It("is divided exactly over the broker's Ready pods, and the rest over the workload's", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 4))).To(Succeed())
		Expect(k8s.Create(ctx, newDeployment(ns, "broker", 2))).To(Succeed())
		createReadyPods(ctx, ns, "gateway", 4)
		createBrokers(ctx, ns)
		waitCached(ctx, ns, "gateway", 4, 4)
		waitCached(ctx, ns, "broker", 2, 2)
		model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
		Expect(k8s.Create(ctx, reserveQuota(ns, intstr.FromInt32(8)))).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "broker-00", "broker-01", "gateway-00", "gateway-01", "gateway-02", "gateway-03")).To(Equal(map[string]int{
				"broker-00": 4, "broker-01": 4, "gateway-00": 8, "gateway-01": 8, "gateway-02": 8, "gateway-03": 8,
			}))
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Reserve).To(Equal(&v1alpha1.ReserveStatus{Broker: "broker", Requested: 8, Permits: 8, HandedOut: 8,
				Replicas: []v1alpha1.PodShareStatus{{Name: "broker-00", Permits: 4}, {Name: "broker-01", Permits: 4}}}))
			c := reserved(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonReserveHeld))
			g.Expect(c.Message).To(Equal("reserve of 8 permits: 8 handed out to 2 Ready replicas of Deployment broker"))
			g.Expect(ready(g, q).Message).To(Equal("Ready pods 4; 32 usable permits = 8 × 4 + 0, published to ConfigMap gateway-backpressure"))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(8))
			g.Expect(q.Status.PodPermits).To(Equal("8"), "PERMITS/POD counts the workload's pods, not the broker's 4")
			div := divisionOf(g, q)
			g.Expect([]int32{div.Usable, div.HandedOut, div.Held, div.Base, div.Extra}).To(Equal([]int32{40, 40, 40, 8, 0}))
			g.Expect(div.Shares).To(Equal([]v1alpha1.ShareCount{{Permits: 8, Pods: 4}}))
		}).Should(Succeed())
		Expect(model.verify()).To(Equal(40))
	})

	It("takes a percentage of the usable permits, rounded down, and cuts one that leaves a pod nothing, moving permits only as the pods let go", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 3))).To(Succeed())
		Expect(k8s.Create(ctx, newDeployment(ns, "broker", 2))).To(Succeed())
		pods := createReadyPods(ctx, ns, "gateway", 3)
		createBrokers(ctx, ns)
		waitCached(ctx, ns, "gateway", 3, 3)
		waitCached(ctx, ns, "broker", 2, 2)
		model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
		Expect(k8s.Create(ctx, reserveQuota(ns, intstr.FromString("27%")))).To(Succeed())

		// floor(40 × 27 %) = 10: 5 + 5 to the brokers, 30 over 3 pods.
		names := []string{"broker-00", "broker-01", "gateway-00", "gateway-01", "gateway-02"}
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, names...)).To(Equal(map[string]int{"broker-00": 5, "broker-01": 5, "gateway-00": 10, "gateway-01": 10, "gateway-02": 10}))
			g.Expect(getQuota(ctx, g, ns, "logistics").Status.Reserve).To(HaveValue(HaveField("Requested", BeEquivalentTo(10))))
		}).Should(Succeed())
		model.acknowledge(ctx, pods...)

		// All of it would leave the pods nothing: cut to 40 - 3 = 37. The
		// pods are told 1 at once; the brokers get the rest only as the
		// pods acknowledge.
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			q.Spec.Reserve.Permits = intstr.FromString("100%")
			g.Expect(k8s.Update(ctx, q)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, names...)).To(Equal(map[string]int{"broker-00": 5, "broker-01": 5, "gateway-00": 1, "gateway-01": 1, "gateway-02": 1}))
			q := getQuota(ctx, g, ns, "logistics")
			c := reserved(g, q)
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonReserveTooLarge))
			g.Expect(c.Message).To(ContainSubstring("spec.reserve.permits asks for 40 permits, which would leave some of the 3 Ready pods without a permit of their own; the reserve is cut to 37"))
			g.Expect(shareOf(divisionOf(g, q), "gateway-00").Holds).To(HaveValue(BeEquivalentTo(10)))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "broker-00", "broker-01")).To(Equal(map[string]int{"broker-00": 5, "broker-01": 5}))
		}, "1s").Should(Succeed())
		model.acknowledge(ctx, pods...)
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, names...)).To(Equal(map[string]int{"broker-00": 19, "broker-01": 18, "gateway-00": 1, "gateway-01": 1, "gateway-02": 1}))
		}).Should(Succeed())
		Expect(model.verify()).To(Equal(40))
	})

	It("counts a broker replica that leaves until it acknowledges, and only then gives its slice to the one that stays", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 4))).To(Succeed())
		broker := newDeployment(ns, "broker", 2)
		Expect(k8s.Create(ctx, broker)).To(Succeed())
		createReadyPods(ctx, ns, "gateway", 4)
		brokers := createBrokers(ctx, ns)
		waitCached(ctx, ns, "gateway", 4, 4)
		waitCached(ctx, ns, "broker", 2, 2)
		model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
		Expect(k8s.Create(ctx, reserveQuota(ns, intstr.FromInt32(8)))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "broker-00", "broker-01")).To(Equal(map[string]int{"broker-00": 4, "broker-01": 4}))
		}).Should(Succeed())
		model.acknowledge(ctx, brokers...)

		// 2 → 1: broker-01 terminates and keeps its 4, as a leaving pod
		// does, until it hands them back; broker-00's target is 8.
		scaleDeployment(ctx, broker, 1)
		Expect(k8s.Delete(ctx, brokers[1])).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Reserve.Replicas).To(Equal([]v1alpha1.PodShareStatus{
				{Name: "broker-00", Permits: 4, Target: ptr.To[int32](8)}, {Name: "broker-01", Permits: 4},
			}))
			g.Expect(handedOver(g, q).Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
			g.Expect(shares(ctx, g, ns, "broker-00", "broker-01")).To(Equal(map[string]int{"broker-00": 4, "broker-01": 4}))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "broker-00")).To(Equal(map[string]int{"broker-00": 4}))
		}, "1s").Should(Succeed())

		// It drained its leases and says so: broker-00 gets all 8.
		model.release(ctx, getQuota(ctx, Default, ns, "logistics").UID, brokers[1])
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, "broker-00", "gateway-00")).To(Equal(map[string]int{"broker-00": 8, "gateway-00": 8}))
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Reserve.Replicas).To(Equal([]v1alpha1.PodShareStatus{{Name: "broker-00", Permits: 8}}))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
		}).Should(Succeed())
		releasePod(ctx, brokers[1])
		Expect(model.verify()).To(Equal(40))
	})

	It("leaves the reserve unassigned while the broker Deployment is missing, and gives it to its pods when they are Ready", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 4))).To(Succeed())
		createReadyPods(ctx, ns, "gateway", 4)
		waitCached(ctx, ns, "gateway", 4, 4)
		model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
		Expect(k8s.Create(ctx, reserveQuota(ns, intstr.FromInt32(8)))).To(Succeed())

		gateway := []string{"gateway-00", "gateway-01", "gateway-02", "gateway-03"}
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateway...)).To(Equal(map[string]int{"gateway-00": 8, "gateway-01": 8, "gateway-02": 8, "gateway-03": 8}))
			q := getQuota(ctx, g, ns, "logistics")
			c := reserved(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonBrokerNotFound))
			g.Expect(c.Message).To(Equal("Deployment broker (spec.reserve.brokerRef) not found; the reserve of 8 permits is held by nobody until one of its pods is Ready"))
			g.Expect(q.Status.Reserve).To(Equal(&v1alpha1.ReserveStatus{Broker: "broker", Requested: 8, Permits: 8}))
			g.Expect(divisionOf(g, q).HandedOut).To(BeEquivalentTo(32))
		}).Should(Succeed())

		// The broker appears: its replicas get the free reserve, no pod's
		// share moves. (The first replica seen Ready may be told all 8
		// and give half back to the second: they acknowledge.)
		Expect(k8s.Create(ctx, newDeployment(ns, "broker", 2))).To(Succeed())
		brokers := createBrokers(ctx, ns)
		Eventually(func(g Gomega) {
			model.acknowledge(ctx, brokers...)
			g.Expect(shares(ctx, g, ns, append([]string{"broker-00", "broker-01"}, gateway...)...)).To(Equal(map[string]int{
				"broker-00": 4, "broker-01": 4, "gateway-00": 8, "gateway-01": 8, "gateway-02": 8, "gateway-03": 8,
			}))
			g.Expect(reserved(g, getQuota(ctx, g, ns, "logistics")).Reason).To(Equal(v1alpha1.ReasonReserveHeld))
		}).Should(Succeed())
		Expect(model.verify()).To(Equal(40))
	})

	It("sizes a pod's waiting room for its own permits and the reserve its broker's Ready replicas lend", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 8))).To(Succeed())
		createReadyPods(ctx, ns, "gateway", 8)
		waitCached(ctx, ns, "gateway", 8, 8)
		model := watchInFlight(ctx, ns, "gateway-backpressure", "logistics", 40)
		// The sample: 40 usable over 8 pods, 220 ms latency, a 40 ms wait.
		q := builders.MakeQuota(ns, "logistics").Workload("Deployment", "gateway").Concurrency(50).
			Deadline(300*time.Millisecond).Queue(40*time.Millisecond, 40*time.Millisecond).Reserve(intstr.FromInt32(8), "broker").Obj()
		Expect(k8s.Create(ctx, q)).To(Succeed())

		gateway := make([]string, 8)
		for i := range gateway {
			gateway[i] = fmt.Sprintf("gateway-%02d", i)
		}
		// rooms returns the waiting room the document gives each of names.
		rooms := func(g Gomega, names ...string) map[string]int {
			doc, _ := publishedDocument(ctx, g, ns, "gateway-backpressure", "logistics")
			out := map[string]int{}
			for _, n := range names {
				out[n] = doc.For(n).QueueCapacity
			}
			return out
		}
		all := func(names []string, v int) map[string]int {
			out := map[string]int{}
			for _, n := range names {
				out[n] = v
			}
			return out
		}
		// No broker: nobody lends the reserve, so the pods' rooms count
		// only their own 32 / 8 = 4 permits: floor(4 × 40 / 220) = 0.
		Eventually(func(g Gomega) {
			g.Expect(shares(ctx, g, ns, gateway...)).To(Equal(all(gateway, 4)))
			g.Expect(rooms(g, gateway...)).To(Equal(all(gateway, 0)))
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(reserved(g, q).Reason).To(Equal(v1alpha1.ReasonBrokerNotFound))
			g.Expect(q.Status.PerPod.QueueCapacity).To(BeEquivalentTo(0))
		}).Should(Succeed())

		// The broker's replicas hold the 8: a waiter is served by its
		// pod's permit or a lent one, floor((4 + 8) × 40 / 220) = 2. The
		// replicas' own rooms stay sized by their slices: floor(4 × 40 /
		// 220) = 0.
		Expect(k8s.Create(ctx, newDeployment(ns, "broker", 2))).To(Succeed())
		brokers := createBrokers(ctx, ns)
		Eventually(func(g Gomega) {
			model.acknowledge(ctx, brokers...)
			g.Expect(shares(ctx, g, ns, "broker-00", "broker-01")).To(Equal(map[string]int{"broker-00": 4, "broker-01": 4}))
			g.Expect(shares(ctx, g, ns, gateway...)).To(Equal(all(gateway, 4)))
			g.Expect(rooms(g, gateway...)).To(Equal(all(gateway, 2)))
			g.Expect(rooms(g, "broker-00", "broker-01")).To(Equal(map[string]int{"broker-00": 0, "broker-01": 0}))
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(reserved(g, q).Reason).To(Equal(v1alpha1.ReasonReserveHeld))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(4))
			g.Expect(q.Status.PerPod.QueueCapacity).To(BeEquivalentTo(2))
		}).Should(Succeed())
		Expect(model.verify()).To(Equal(40))
	})

	It("comes out of a sharing caller's part of a contract", func(ctx SpecContext) {
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		dc := sharedContract(ctx, nsA, 60) // 48 usable: 24 for each caller
		var callerA []*corev1.Pod
		for _, ns := range []string{nsA, nsB} {
			Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
			pods := createReadyPods(ctx, ns, "api", 2)
			if ns == nsA {
				callerA = pods
			}
			waitCached(ctx, ns, "api", 2, 2)
		}
		Expect(k8s.Create(ctx, newDeployment(nsA, "broker", 2))).To(Succeed())
		callerA = append(callerA, createBrokers(ctx, nsA)...)
		waitCached(ctx, nsA, "broker", 2, 2)
		// A alone holds all 48 until B comes: its document never gives more.
		model := watchInFlight(ctx, nsA, "api-backpressure", "payments", 48)
		a := sharingQuota(nsA, "payments", dc, 0)
		a.Spec.Reserve = &v1alpha1.Reserve{Permits: intstr.FromString("20%"), BrokerRef: v1alpha1.BrokerReference{Name: "broker"}}
		Expect(k8s.Create(ctx, a)).To(Succeed())
		// floor(48 × 20 %) = 9: 5 + 4 to the brokers, 39 over the pods.
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, nsA, "api-backpressure", "payments")
			g.Expect([]int{doc.For("broker-00").Permits, doc.For("broker-01").Permits, doc.For("api-00").Permits, doc.For("api-01").Permits}).To(Equal([]int{5, 4, 20, 19}))
		}).Should(Succeed())
		Expect(k8s.Create(ctx, sharingQuota(nsB, "payments", dc, 0))).To(Succeed())

		// floor(24 × 20 %) = 4 of A's part: 2 + 2 to its brokers, 20 over
		// its 2 pods; B's pods 12 each, once A's pods and brokers let go
		// of what A held before B came.
		Eventually(func(g Gomega) { publishedDocument(ctx, g, nsA, "api-backpressure", "payments") }).Should(Succeed())
		Eventually(func(g Gomega) {
			model.acknowledge(ctx, callerA...)
			doc, _ := publishedDocument(ctx, g, nsA, "api-backpressure", "payments")
			g.Expect(map[string]int{"broker-00": doc.For("broker-00").Permits, "broker-01": doc.For("broker-01").Permits,
				"api-00": doc.For("api-00").Permits, "api-01": doc.For("api-01").Permits}).To(Equal(map[string]int{
				"broker-00": 2, "broker-01": 2, "api-00": 10, "api-01": 10,
			}))
			docB, _ := publishedDocument(ctx, g, nsB, "api-backpressure", "payments")
			g.Expect([]int{docB.For("api-00").Permits, docB.For("api-01").Permits, docB.For("broker-00").Permits}).To(Equal([]int{12, 12, 0}))
			q := getQuota(ctx, g, nsA, "payments")
			g.Expect(q.Status.Reserve).To(HaveValue(HaveField("HandedOut", BeEquivalentTo(4))))
			g.Expect(reserved(g, q).Reason).To(Equal(v1alpha1.ReasonReserveHeld))
			g.Expect(meta.FindStatusCondition(getQuota(ctx, g, nsB, "payments").Status.Conditions, v1alpha1.ConditionReserved)).To(BeNil())
		}).Should(Succeed())
		Expect(model.verify()).To(Equal(48))
	})
})
