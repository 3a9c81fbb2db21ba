package controller

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

var _ = Describe("DownstreamQuota controller", func() {
	It("reports WorkloadNotFound until the workload exists, then publishes the plan", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newQuota(ns, "logistics", "gateway", 50))).To(Succeed())

		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonWorkloadNotFound))
			g.Expect(c.Message).To(ContainSubstring("Deployment gateway not found"))
			g.Expect(c.LastTransitionTime.Time).To(BeTemporally("==", fakeClock.Now().Truncate(time.Second)))
			g.Expect(q.Status.ObservedGeneration).To(Equal(q.Generation))
			g.Expect(q.Status.ConfigMap).To(BeNil())
		}).Should(Succeed())
		Expect(configMapGone(ctx, Default, ns, "gateway-backpressure")).To(BeTrue())

		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 8))).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"Spec": BeEquivalentTo(8), "ExistingPods": BeEquivalentTo(0),
				"Divisor": BeEquivalentTo(8), "DivisorSource": Equal(v1alpha1.DivisorWorkloadSpec),
			})))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(5)) // 50 × 80% / 8

			doc, cm := publishedDocument(ctx, g, ns, "gateway-backpressure", "logistics")
			g.Expect(doc.Permits).To(Equal(5))
			g.Expect(doc.Gate).To(Equal("logistics"))
			g.Expect(doc.Downstream).To(Equal("logistics.example.com"))
			g.Expect(doc.Generation).To(Equal(q.Generation))
			g.Expect(doc.Hash).To(Equal(plan.Hash(doc)))
			g.Expect(q.Status.ConfigMap).To(Equal(&v1alpha1.PublishedConfigMap{Name: "gateway-backpressure", Key: "logistics.json", Hash: doc.Hash}))
			g.Expect(cm.Labels).To(HaveKeyWithValue(v1alpha1.WorkloadLabel, "gateway"))
			g.Expect(cm.Labels).To(HaveKeyWithValue(ManagedByLabel, ManagedByValue))
			g.Expect(cm.OwnerReferences).To(ConsistOf(MatchFields(IgnoreExtras, Fields{
				"Kind": Equal("DownstreamQuota"), "Name": Equal("logistics"), "UID": Equal(q.UID), "Controller": BeNil(),
			})))
		}).Should(Succeed())
	})

	It("keeps the sum of shares within the contract while the HPA scales 8 → 16 → 4", func(ctx SpecContext) {
		const handedOut = 40 // 50 × 80%
		ns := newNamespace(ctx)
		d := newDeployment(ns, "gateway", 8)
		Expect(k8s.Create(ctx, d)).To(Succeed())
		hpa := newHPA(ns, "gateway", "gateway", 2, 20)
		Expect(k8s.Create(ctx, hpa)).To(Succeed())
		setHPAStatus(ctx, hpa, 8, 8)

		// pods are the pods that exist, terminating ones included; told is
		// the permits each was last told: a new pod reads the published
		// document when it starts, an old one when it reloads.
		pods := map[string]*corev1.Pod{}
		told := map[string]int{}
		published := 0
		newPods := func(from, to int) {
			for i := from; i < to; i++ {
				p := createPod(ctx, ns, "gateway", fmt.Sprintf("gateway-%02d", i))
				pods[p.Name], told[p.Name] = p, published
			}
		}
		inFlightBound := func() int {
			sum := 0
			for name := range pods {
				sum += told[name]
			}
			return sum
		}
		// expect waits for the plan of a step, checks that the pods that
		// exist hold no more than the contract hands out both before and
		// after they reload it, and lets them reload.
		expect := func(step string, divisor int32, source v1alpha1.DivisorSource, permits int) {
			By(fmt.Sprintf("%s: divisor %d (%s), %d permits per pod", step, divisor, source, permits))
			Eventually(func(g Gomega) {
				q := getQuota(ctx, g, ns, "logistics")
				g.Expect(q.Status.Replicas).NotTo(BeNil())
				g.Expect(q.Status.Replicas.Divisor).To(Equal(divisor))
				g.Expect(q.Status.Replicas.DivisorSource).To(Equal(source))
				g.Expect(q.Status.Replicas.ExistingPods).To(BeEquivalentTo(len(pods)))
				g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(permits))
				doc, _ := publishedDocument(ctx, g, ns, "gateway-backpressure", "logistics")
				g.Expect(doc.Permits).To(Equal(permits))
				g.Expect(q.Status.ConfigMap.Hash).To(Equal(doc.Hash))
			}).Should(Succeed())
			Expect(inFlightBound()).To(BeNumerically("<=", handedOut), "pods before reloading: %v", told)
			published = permits
			for name := range pods {
				told[name] = permits
			}
			Expect(inFlightBound()).To(BeNumerically("<=", handedOut), "pods after reloading: %v", told)
		}

		newPods(0, 8)
		Expect(k8s.Create(ctx, newQuota(ns, "logistics", "gateway", 50))).To(Succeed())
		expect("steady at 8", 8, v1alpha1.DivisorWorkloadSpec, 5)

		// Scale-up: the HPA writes the workload's replicas first; every pod
		// shrinks before a new pod exists.
		scaleDeployment(ctx, d, 16)
		expect("spec replicas 16 before new pods", 16, v1alpha1.DivisorWorkloadSpec, 2)
		setHPAStatus(ctx, hpa, 8, 16)
		expect("HPA desired 16", 16, v1alpha1.DivisorWorkloadSpec, 2)
		newPods(8, 16)
		expect("16 pods running", 16, v1alpha1.DivisorWorkloadSpec, 2)

		// Scale-down: spec and HPA drop to 4 at once, but 16 pods still
		// hold calls, and 12 of them keep holding calls while terminating.
		scaleDeployment(ctx, d, 4)
		setHPAStatus(ctx, hpa, 16, 4)
		expect("spec replicas 4 with 16 pods", 16, v1alpha1.DivisorExistingPods, 2)
		leaving := make([]*corev1.Pod, 0, 12)
		for i := 4; i < 16; i++ {
			pod := pods[fmt.Sprintf("gateway-%02d", i)]
			Expect(k8s.Delete(ctx, pod)).To(Succeed())
			leaving = append(leaving, pod)
		}
		expect("12 pods terminating", 16, v1alpha1.DivisorExistingPods, 2)
		Consistently(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Replicas.Divisor).To(BeEquivalentTo(16))
			g.Expect(q.Status.PerPod.Permits).To(BeEquivalentTo(2))
		}).WithTimeout(time.Second).Should(Succeed())

		// The kubelet lets terminating pods go one at a time; shares grow
		// only as they leave.
		for i, pod := range leaving {
			releasePod(ctx, pod)
			delete(pods, pod.Name)
			existing := int32(16 - i - 1)
			source := v1alpha1.DivisorExistingPods
			if existing <= 4 {
				existing, source = 4, v1alpha1.DivisorWorkloadSpec
			}
			expect(fmt.Sprintf("%s gone", pod.Name), existing, source, handedOut/int(existing))
		}

		By("emitting an event with the arithmetic for each plan change")
		Eventually(func(g Gomega) []string {
			return notes(quotaEvents(ctx, g, ns, "logistics"))
		}).Should(And(
			containsSubstring("PlanChanged: permits 5: divisor 8 (workload spec replicas); 50 × 80% / 8 = 5 per pod; published to ConfigMap gateway-backpressure"),
			containsSubstring("PlanChanged: permits 5→2: divisor 8→16 (workload spec replicas); 50 × 80% / 16 = 2.5 per pod"),
			containsSubstring("PlanChanged: permits 2→3: divisor 14→13 (existing pods); 50 × 80% / 13 = 3.07 per pod"),
			containsSubstring("PlanChanged: permits 8→10: divisor 5→4 (workload spec replicas); 50 × 80% / 4 = 10 per pod"),
		))
	})

	It("shares one ConfigMap between the quotas of a workload and removes only a deleted quota's gate", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
		payments, search := newQuota(ns, "payments", "api", 40), newQuota(ns, "search", "api", 8)
		Expect(k8s.Create(ctx, payments)).To(Succeed())
		Expect(k8s.Create(ctx, search)).To(Succeed())

		var searchData string
		Eventually(func(g Gomega) {
			paymentsDoc, cm := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			searchDoc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "search")
			g.Expect(paymentsDoc.Permits).To(Equal(8)) // 40 × 80% / 4
			g.Expect(searchDoc.Permits).To(Equal(1))   // 8 × 80% / 4 = 1.6
			g.Expect(keys(cm.Data)).To(Equal([]string{"payments.json", "search.json"}))
			g.Expect(cm.OwnerReferences).To(HaveLen(2))
			searchData = cm.Data["search.json"]
		}).Should(Succeed())

		Expect(k8s.Delete(ctx, payments)).To(Succeed())
		Eventually(func(g Gomega) {
			_, cm := publishedDocument(ctx, g, ns, "api-backpressure", "search")
			g.Expect(keys(cm.Data)).To(Equal([]string{"search.json"}))
			g.Expect(cm.Data["search.json"]).To(Equal(searchData))
			g.Expect(cm.OwnerReferences).To(ConsistOf(HaveField("Name", "search")))
		}).Should(Succeed())

		Expect(k8s.Delete(ctx, search)).To(Succeed())
		Eventually(func(g Gomega) bool { return configMapGone(ctx, g, ns, "api-backpressure") }).Should(BeTrue())
	})

	It("moves a gate when the quota names another ConfigMap", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		q := newQuota(ns, "payments", "api", 10)
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) { publishedDocument(ctx, g, ns, "api-backpressure", "payments") }).Should(Succeed())

		patch := client.MergeFrom(q.DeepCopy())
		q.Spec.ConfigMapName = "api-gates"
		Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, ns, "api-gates", "payments")
			g.Expect(doc.Generation).To(BeEquivalentTo(2))
			g.Expect(configMapGone(ctx, g, ns, "api-backpressure")).To(BeTrue())
			g.Expect(getQuota(ctx, g, ns, "payments").Status.ConfigMap.Name).To(Equal("api-gates"))
		}).Should(Succeed())
	})

	It("leaves a ConfigMap it does not own untouched and reports ConfigMapConflict", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		foreign := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-backpressure"},
			Data:       map[string]string{"settings": "mine"},
		}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		Expect(k8s.Create(ctx, newDeployment(ns, "web", 2))).To(Succeed())
		Expect(k8s.Create(ctx, newQuota(ns, "checkout", "web", 10))).To(Succeed())

		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "checkout"))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonConfigMapConflict))
			g.Expect(c.Message).To(ContainSubstring("ConfigMap web-backpressure exists and is not managed by backpressure-operator"))
			g.Expect(notes(quotaEvents(ctx, g, ns, "checkout"))).To(containsSubstring("ConfigMapConflict: ConfigMap web-backpressure exists"))
		}).Should(Succeed())
		// Several conflict rechecks later, the ConfigMap is still as it was.
		Consistently(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), cm)).To(Succeed())
			g.Expect(cm.ResourceVersion).To(Equal(foreign.ResourceVersion))
			g.Expect(cm.Data).To(Equal(map[string]string{"settings": "mine"}))
		}).WithTimeout(3 * conflictRecheck).Should(Succeed())

		By("publishing once the foreign ConfigMap is gone")
		Expect(k8s.Delete(ctx, foreign)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ready(g, getQuota(ctx, g, ns, "checkout")).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			publishedDocument(ctx, g, ns, "web-backpressure", "checkout")
		}).Should(Succeed())
	})

	It("writes nothing when a reconcile finds nothing new", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 3))).To(Succeed())
		pods := []*corev1.Pod{createPod(ctx, ns, "api", "api-0"), createPod(ctx, ns, "api", "api-1"), createPod(ctx, ns, "api", "api-2")}
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())

		var quotaRV, configMapRV string
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(ready(g, q).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(q.Status.Replicas.ExistingPods).To(BeEquivalentTo(3))
			_, cm := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			quotaRV, configMapRV = q.ResourceVersion, cm.ResourceVersion
		}).Should(Succeed())
		// The reconciles that the last writes' own watch events start find
		// nothing new; wait until the count holds still.
		settled := settledWrites(ns)
		events := len(quotaEvents(ctx, Default, ns, "payments"))

		By("reconciling directly")
		for range 5 {
			res, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "payments"}})
			Expect(err).NotTo(HaveOccurred())
			Expect(res).To(Equal(reconcile.Result{}))
		}
		By("waking the quota through a pod whose labels changed but still match")
		patch := client.MergeFrom(pods[0].DeepCopy())
		pods[0].Labels["release"] = "blue"
		Expect(k8s.Patch(ctx, pods[0], patch)).To(Succeed())

		Consistently(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(q.ResourceVersion).To(Equal(quotaRV))
			_, cm := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(cm.ResourceVersion).To(Equal(configMapRV))
			g.Expect(writes.TotalIn(ns)).To(Equal(settled))
			g.Expect(quotaEvents(ctx, g, ns, "payments")).To(HaveLen(events))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		By("writing the status, but not the ConfigMap, when a fact changes and the plan does not")
		hpa := newHPA(ns, "api", "api", 1, 10)
		Expect(k8s.Create(ctx, hpa)).To(Succeed())
		setHPAStatus(ctx, hpa, 3, 2)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(q.Status.Replicas.HPADesired).To(Equal(ptr.To[int32](2)))
			g.Expect(q.Status.Replicas.Divisor).To(BeEquivalentTo(3))
		}).Should(Succeed())
		_, cm := publishedDocument(ctx, Default, ns, "api-backpressure", "payments")
		Expect(cm.ResourceVersion).To(Equal(configMapRV))
	})

	It("counts the pods that acknowledged the current plan", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 3))).To(Succeed())
		a, b, c := createPod(ctx, ns, "api", "api-a"), createPod(ctx, ns, "api", "api-b"), createPod(ctx, ns, "api", "api-c")
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())

		var hash string
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(q.Status.ConfigMap).NotTo(BeNil())
			g.Expect(q.Status.Rollout).To(Equal(&v1alpha1.RolloutStatus{Acknowledged: 0, Total: 3, Pending: []string{"api-a", "api-b", "api-c"}}))
			hash = q.Status.ConfigMap.Hash
		}).Should(Succeed())

		acknowledge(ctx, "payments", hash, a, b)
		acknowledge(ctx, "payments", "0123456789abcdef0123456789abcdef", c) // a plan it applied earlier
		Eventually(func(g Gomega) *v1alpha1.RolloutStatus {
			return getQuota(ctx, g, ns, "payments").Status.Rollout
		}).Should(Equal(&v1alpha1.RolloutStatus{Acknowledged: 2, Total: 3, Pending: []string{"api-c"}}))

		acknowledge(ctx, "payments", hash, c)
		Eventually(func(g Gomega) *v1alpha1.RolloutStatus {
			return getQuota(ctx, g, ns, "payments").Status.Rollout
		}).Should(Equal(&v1alpha1.RolloutStatus{Acknowledged: 3, Total: 3}))
	})

	It("reports a named HPA that does not exist, and divides by its desired replicas once it does", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
		q := newQuota(ns, "payments", "api", 100)
		q.Spec.HPAName = "api-hpa"
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonHPANotFound))
			g.Expect(c.Message).To(ContainSubstring("HorizontalPodAutoscaler api-hpa not found; permits 20 per pod over divisor 4"))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Permits).To(Equal(20))
		}).Should(Succeed())

		hpa := newHPA(ns, "api-hpa", "api", 2, 10)
		Expect(k8s.Create(ctx, hpa)).To(Succeed())
		setHPAStatus(ctx, hpa, 4, 10)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(ready(g, q).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"HPAMin": Equal(ptr.To[int32](2)), "HPAMax": Equal(ptr.To[int32](10)),
				"HPACurrent": Equal(ptr.To[int32](4)), "HPADesired": Equal(ptr.To[int32](10)),
				"Divisor": BeEquivalentTo(10), "DivisorSource": Equal(v1alpha1.DivisorHPADesired),
			})))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Permits).To(Equal(8))
		}).Should(Succeed())
	})

	It("publishes zero permits and reports QuotaTooSmall when a pod's share is below one", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 8))).To(Succeed())
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 5))).To(Succeed())
		Eventually(func(g Gomega) {
			c := ready(g, getQuota(ctx, g, ns, "payments"))
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonQuotaTooSmall))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Permits).To(BeZero())
		}).Should(Succeed())
	})
})
