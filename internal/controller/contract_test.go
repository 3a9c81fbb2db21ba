package controller

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

var _ = Describe("DownstreamContract controller", func() {
	It("splits one contract over two workloads in two namespaces as they scale independently, never handing out more than it", func(ctx SpecContext) {
		nsA, nsB := newNamespace(ctx), newNamespace(ctx)
		contract := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "shared-" + nsA},
			Spec: v1alpha1.DownstreamContractSpec{
				NamespaceSelector: &metav1.LabelSelector{}, // every namespace
				Downstream:        "ledger-" + nsA + ".example.com",
				Contract:          v1alpha1.Contract{Concurrency: 50}, // 40 usable at 80%
			},
		}
		Expect(k8s.Create(ctx, contract)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, contract))).To(Succeed()) })

		caller := func(ns, workload string, demand *int32) *v1alpha1.DownstreamQuota {
			Expect(k8s.Create(ctx, newDeployment(ns, workload, 2))).To(Succeed())
			q := &v1alpha1.DownstreamQuota{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"},
				Spec: v1alpha1.DownstreamQuotaSpec{
					WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: workload},
					Downstream:  contract.Spec.Downstream,
					ContractRef: &v1alpha1.ContractReference{Name: contract.Name},
					Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
					Deadline:    metav1.Duration{Duration: time.Second},
				},
			}
			if demand != nil {
				q.Spec.Demand = &v1alpha1.Demand{InFlight: demand}
			}
			Expect(k8s.Create(ctx, q)).To(Succeed())
			return q
		}
		qa := caller(nsA, "search", nil)
		qb := caller(nsB, "billing", ptr.To[int32](10))
		a0, a1 := readyPod(ctx, nsA, "search", "search-0"), readyPod(ctx, nsA, "search", "search-1")
		b0, b1 := readyPod(ctx, nsB, "billing", "billing-0"), readyPod(ctx, nsB, "billing", "billing-1")

		// The split: billing wants 10 in flight and gets it; search gets
		// the other 30. Every pod's share is in its own namespace's
		// ConfigMap. The pods hold no calls, so they acknowledge whatever
		// they were told, as the runtime would; search's pods may have been
		// told more before billing's pods were Ready.
		Eventually(func(g Gomega) {
			dc := getContract(ctx, g, contract.Name)
			current := fmt.Sprintf("%s/%d", dc.UID, dc.Status.Division.Revision)
			ackShared(ctx, qa.Name, current, a0, a1)
			ackShared(ctx, qb.Name, current, b0, b1)
			g.Expect(dc.Status.Usable).To(BeEquivalentTo(40))
			g.Expect(dc.Status.Callers).To(HaveLen(2))
			parts := map[string]int32{}
			for _, c := range dc.Status.Callers {
				parts[c.Namespace] = c.Permits
			}
			g.Expect(parts).To(Equal(map[string]int32{nsA: 30, nsB: 10}))
			docA, _ := publishedDocument(ctx, g, nsA, "search-backpressure", "ledger")
			docB, _ := publishedDocument(ctx, g, nsB, "billing-backpressure", "ledger")
			g.Expect([]int{docA.For("search-0").Permits, docA.For("search-1").Permits}).To(Equal([]int{15, 15}))
			g.Expect([]int{docB.For("billing-0").Permits, docB.For("billing-1").Permits}).To(Equal([]int{5, 5}))
			g.Expect(docA.Epoch).To(Equal(string(dc.UID)))
			own := getQuota(ctx, g, nsA, qa.Name).Status.Division
			g.Expect(own).NotTo(BeNil())
			g.Expect(own.Usable).To(BeEquivalentTo(30))
			// A caller's status names its own pods, without the namespace
			// the contract keys them by.
			g.Expect(own.Pods).To(ConsistOf(HaveField("Name", "search-0"), HaveField("Name", "search-1")))
			g.Expect(dc.Status.Division.Pods).To(ContainElement(HaveField("Name", nsB+"/ledger/billing-0")))
		}).Should(Succeed())
		within := func(g Gomega) {
			dc := getContract(ctx, g, contract.Name)
			g.Expect(heldBy(dc.Status.Division)).To(BeNumerically("<=", 40), "the contract's pods may hold more than its 40 usable permits: %+v", dc.Status.Division)
		}

		// Billing now wants 30: the fair split is 20 and 20. Search's pods
		// are told 10 each at once; billing's are granted only what
		// search's pods acknowledge.
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, nsB, qb.Name)
			q.Spec.Demand.InFlight = ptr.To[int32](30)
			g.Expect(k8s.Update(ctx, q)).To(Succeed())
		}).Should(Succeed())
		var rev int64
		Eventually(func(g Gomega) {
			dc := getContract(ctx, g, contract.Name)
			docA, _ := publishedDocument(ctx, g, nsA, "search-backpressure", "ledger")
			g.Expect(docA.For("search-0").Permits).To(Equal(10))
			g.Expect(docA.For("search-1").Permits).To(Equal(10))
			rev = docA.Revision
			g.Expect(dc.Status.Division.HandedOut).To(BeEquivalentTo(30))
			c := meta.FindStatusCondition(dc.Status.Conditions, v1alpha1.ConditionHandedOver)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			within(g)
			docB, _ := publishedDocument(ctx, g, nsB, "billing-backpressure", "ledger")
			g.Expect(docB.For("billing-0").Permits + docB.For("billing-1").Permits).To(Equal(10))
		}).WithTimeout(time.Second).Should(Succeed())

		// One search pod lets go: billing gets its 5, not more.
		dc := &v1alpha1.DownstreamContract{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: contract.Name}, dc)).To(Succeed())
		ackShared(ctx, qa.Name, fmt.Sprintf("%s/%d", dc.UID, rev), a0)
		Eventually(func(g Gomega) {
			within(g)
			docB, _ := publishedDocument(ctx, g, nsB, "billing-backpressure", "ledger")
			g.Expect(docB.For("billing-0").Permits + docB.For("billing-1").Permits).To(Equal(15))
		}).Should(Succeed())
		ackShared(ctx, qa.Name, fmt.Sprintf("%s/%d", dc.UID, rev), a1)
		Eventually(func(g Gomega) {
			within(g)
			dc := getContract(ctx, g, contract.Name)
			docB, _ := publishedDocument(ctx, g, nsB, "billing-backpressure", "ledger")
			g.Expect([]int{docB.For("billing-0").Permits, docB.For("billing-1").Permits}).To(Equal([]int{10, 10}))
			g.Expect(dc.Status.Division.HandedOut).To(BeEquivalentTo(40))
			g.Expect(meta.IsStatusConditionTrue(dc.Status.Conditions, v1alpha1.ConditionHandedOver)).To(BeTrue())
		}).Should(Succeed())

		// Search scales to three pods on its own: its 20 become 7 + 7 + 6,
		// the extra permits staying with the pods that hold the most, once
		// its pods let go; billing's part does not move.
		a2 := readyPod(ctx, nsA, "search", "search-2")
		Eventually(func(g Gomega) {
			within(g)
			docA, _ := publishedDocument(ctx, g, nsA, "search-backpressure", "ledger")
			g.Expect(docA.For("search-0").Permits + docA.For("search-1").Permits).To(Equal(14))
			rev = docA.Revision
		}).Should(Succeed())
		ackShared(ctx, qa.Name, fmt.Sprintf("%s/%d", dc.UID, rev), a0, a1)
		Eventually(func(g Gomega) {
			within(g)
			docA, _ := publishedDocument(ctx, g, nsA, "search-backpressure", "ledger")
			docB, _ := publishedDocument(ctx, g, nsB, "billing-backpressure", "ledger")
			g.Expect(docA.For("search-0").Permits + docA.For("search-1").Permits + docA.For("search-2").Permits).To(Equal(20))
			g.Expect(docA.For("search-2").Permits).To(Equal(6))
			g.Expect(docB.For("billing-0").Permits + docB.For("billing-1").Permits).To(Equal(20))
		}).Should(Succeed())
		_, _, _ = a2, b0, b1
	})

	It("reports a quota whose contract does not exist, and quotas that name one downstream without sharing a contract", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 1))).To(Succeed())
		orphan := &v1alpha1.DownstreamQuota{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
			Spec: v1alpha1.DownstreamQuotaSpec{
				WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "api"},
				Downstream:  "nowhere.example.com",
				ContractRef: &v1alpha1.ContractReference{Name: "missing-" + ns},
				Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
				Deadline:    metav1.Duration{Duration: time.Second},
			},
		}
		Expect(k8s.Create(ctx, orphan)).To(Succeed())
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "orphan"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(c.Message).To(ContainSubstring("missing-" + ns))
		}).Should(Succeed())

		// A stale write says Ready over it, as a contract step that began
		// before its contract was deleted does once the quota has said the
		// contract is gone: the quota says so again.
		stale := getQuota(ctx, Default, ns, "orphan")
		forged := stale.DeepCopy()
		meta.SetStatusCondition(&forged.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonPlanPublished, Message: "a step of a contract that is gone"})
		Expect(k8s.Status().Patch(ctx, forged, client.MergeFrom(stale))).To(Succeed())
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "orphan"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed(), "a stale Ready stays on a quota whose contract is gone")

		// Two quotas each claim 40 of a downstream that allows 50.
		downstream := "shared-" + ns + ".example.com"
		for _, name := range []string{"one", "two"} {
			q := newQuota(ns, name, "api", 50)
			q.Spec.Downstream = downstream
			Expect(k8s.Create(ctx, q)).To(Succeed())
		}
		for _, name := range []string{"one", "two"} {
			Eventually(func(g Gomega) {
				c := ready(g, getQuota(ctx, g, ns, name))
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractOversubscribed))
				g.Expect(c.Message).To(ContainSubstring("= 80 permits against its concurrency of 50"))
			}).Should(Succeed())
		}

		// A shared contract for the same downstream is counted too, and
		// says so itself.
		dc := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "also-" + ns},
			Spec:       v1alpha1.DownstreamContractSpec{NamespaceSelector: &metav1.LabelSelector{}, Downstream: downstream, Contract: v1alpha1.Contract{Concurrency: 50}},
		}
		Expect(k8s.Create(ctx, dc)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, dc))).To(Succeed()) })
		Eventually(func(g Gomega) {
			got := &v1alpha1.DownstreamContract{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(dc), got)).To(Succeed())
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractOversubscribed))
			g.Expect(c.Message).To(ContainSubstring("= 120 permits against its concurrency of 50"))
			g.Expect(ready(g, getQuota(ctx, g, ns, "one")).Message).To(ContainSubstring("= 120 permits"))
		}).Should(Succeed())
	})
})

var _ = Describe("DownstreamContract with a caller whose workload is missing", func() {
	It("publishes the other callers and the contract's status, and says WorkloadNotFound with a Warning for the missing one", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		contract := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "orphaned-" + ns},
			Spec: v1alpha1.DownstreamContractSpec{
				NamespaceSelector: &metav1.LabelSelector{}, // every namespace
				Downstream:        "orphaned-" + ns + ".example.com",
				Contract:          v1alpha1.Contract{Concurrency: 10}, // 8 usable
			},
		}
		Expect(k8s.Create(ctx, contract)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, contract))).To(Succeed()) })
		quota := func(name, workload string) {
			Expect(k8s.Create(ctx, &v1alpha1.DownstreamQuota{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: v1alpha1.DownstreamQuotaSpec{
					WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: workload},
					Downstream:  contract.Spec.Downstream,
					ContractRef: &v1alpha1.ContractReference{Name: contract.Name},
					Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
					Deadline:    metav1.Duration{Duration: time.Second},
				},
			})).To(Succeed())
		}
		// "a-missing" sorts before "b-present", so a caller that stopped the
		// contract's pass would leave the present one unpublished.
		quota("a-missing", "ghost")
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 1))).To(Succeed())
		readyPod(ctx, ns, "api", "api-0")
		quota("b-present", "api")

		Eventually(func(g Gomega) {
			dc := getContract(ctx, g, contract.Name)
			g.Expect(dc.Status.Usable).To(BeEquivalentTo(8))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "b-present")
			g.Expect(doc.For("api-0").Permits).To(Equal(8))
			g.Expect(ready(g, getQuota(ctx, g, ns, "a-missing")).Reason).To(Equal(v1alpha1.ReasonWorkloadNotFound))
			g.Expect(warnings(ctx, g, ns, "a-missing", v1alpha1.ReasonWorkloadNotFound)).To(HaveLen(1))
		}).Should(Succeed())
	})
})

var _ = Describe("DownstreamContract namespace selector", func() {
	It("admits a namespace's quota once the namespace carries the label, and turns it away when the label goes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		team := "team-" + ns
		contract := &v1alpha1.DownstreamContract{
			ObjectMeta: metav1.ObjectMeta{Name: "selective-" + ns},
			Spec: v1alpha1.DownstreamContractSpec{
				Downstream:        "selective-" + ns + ".example.com",
				Contract:          v1alpha1.Contract{Concurrency: 10}, // 8 usable
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}},
			},
		}
		Expect(k8s.Create(ctx, contract)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, contract))).To(Succeed()) })
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 1))).To(Succeed())
		readyPod(ctx, ns, "api", "api-0")
		Expect(k8s.Create(ctx, &v1alpha1.DownstreamQuota{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "selective"},
			Spec: v1alpha1.DownstreamQuotaSpec{
				WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "api"},
				Downstream:  contract.Spec.Downstream,
				ContractRef: &v1alpha1.ContractReference{Name: contract.Name},
				Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
				Deadline:    metav1.Duration{Duration: time.Second},
			},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "selective"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(c.Message).To(ContainSubstring("does not admit namespace " + ns))
		}).Should(Succeed())

		label := func(labels map[string]string) {
			Eventually(func(g Gomega) {
				n := &corev1.Namespace{}
				g.Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, n)).To(Succeed())
				n.Labels = labels
				g.Expect(k8s.Update(ctx, n)).To(Succeed())
			}).Should(Succeed())
		}
		label(map[string]string{"team": team})
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "selective")
			g.Expect(ready(g, q).Reason).NotTo(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(q.Status.Division).NotTo(BeNil())
			g.Expect(q.Status.Division.Usable).To(BeEquivalentTo(8))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "selective")
			g.Expect(doc.For("api-0").Permits).To(Equal(8))
		}).Should(Succeed())

		// Turned away, its pod is told 0: it may enforce its 8 permits
		// until it lets go of them.
		label(nil)
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "selective"))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonContractNotFound))
			g.Expect(c.Message).To(ContainSubstring("its pods are told 0 permits"))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "selective")
			g.Expect(doc.For("api-0").Permits).To(BeZero())
			dc := getContract(ctx, g, contract.Name)
			g.Expect(heldBy(dc.Status.Division)).To(BeEquivalentTo(8), "the turned-away pod's 8 permits stay counted until it acknowledges")
		}).Should(Succeed())
	})
})

// readyPod creates a pod of workload and makes it Ready, as the kubelet
// does once its readiness probe passes.
func readyPod(ctx context.Context, ns, workload, name string) *corev1.Pod {
	pod := createPod(ctx, ns, workload, name)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// ackShared annotates the pods with an acknowledgement of quota's plan, as
// the runtime does.
func ackShared(ctx context.Context, quota, value string, pods ...*corev1.Pod) {
	for _, pod := range pods {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[appliedAnnotation(quota)] = value
		Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())
	}
}

func getContract(ctx context.Context, g Gomega, name string) *v1alpha1.DownstreamContract {
	dc := &v1alpha1.DownstreamContract{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, dc)).To(Succeed())
	g.Expect(dc.Status.Division).NotTo(BeNil(), "contract %s has no division yet", name)
	return dc
}

// heldBy is Σ over a division's pods of the larger of what each is told
// and what it may still hold.
func heldBy(d *v1alpha1.DivisionStatus) int32 {
	var n int32
	for _, p := range d.Pods {
		n += max(p.Permits, ptr.Deref(p.Holds, 0))
	}
	return n
}
