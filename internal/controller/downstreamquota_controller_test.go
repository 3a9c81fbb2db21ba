package controller

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

var _ = Describe("DownstreamQuota controller", func() {
	It("reports WorkloadNotFound until the workload exists, then publishes a share for every Ready pod", func(ctx SpecContext) {
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
			g.Expect(q.Status.Division).To(BeNil())
		}).Should(Succeed())
		Expect(configMapGone(ctx, Default, ns, "gateway-backpressure")).To(BeTrue())

		// Two pods serve; a third is still starting: it holds nothing and
		// is not named in the document.
		createReadyPods(ctx, ns, "gateway", 2)
		createPod(ctx, ns, "gateway", "gateway-starting")
		waitCached(ctx, ns, "gateway", 3, 2)
		Expect(k8s.Create(ctx, newDeployment(ns, "gateway", 8))).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(c.Message).To(Equal("Ready pods 2; 40 usable permits = 20 × 2 + 0, published to ConfigMap gateway-backpressure"))
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"Spec": BeEquivalentTo(8), "ExistingPods": BeEquivalentTo(3), "ReadyPods": BeEquivalentTo(2),
				"Divisor": BeEquivalentTo(2), "DivisorSource": Equal(v1alpha1.DivisorReadyPods),
			})))
			g.Expect(q.Status.PerPod).To(HaveValue(HaveField("Permits", BeEquivalentTo(20)))) // 50 × 80% / 2
			g.Expect(q.Status.Division).To(Equal(&v1alpha1.DivisionStatus{
				Epoch: string(q.UID), Revision: 1, Usable: 40, Base: 20, HandedOut: 40, Held: 40,
				Shares: []v1alpha1.ShareCount{{Permits: 20, Pods: 2}},
				Told:   []v1alpha1.ToldPods{{Permits: 20, Pods: []string{"gateway-00", "gateway-01"}}},
				Clock:  "envtest",
				Pods:   []v1alpha1.PodShareStatus{{Name: "gateway-00", Permits: 20}, {Name: "gateway-01", Permits: 20}},
			}))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))

			doc, cm := publishedDocument(ctx, g, ns, "gateway-backpressure", "logistics")
			g.Expect(doc.Permits).To(BeZero(), "a pod not named holds nothing")
			g.Expect(doc.Pods).To(HaveLen(2))
			g.Expect(doc.For("gateway-00").Permits).To(Equal(20))
			g.Expect(doc.For("gateway-01").Permits).To(Equal(20))
			g.Expect(doc.For("gateway-starting").Permits).To(BeZero())
			g.Expect(doc.Epoch).To(Equal(string(q.UID)))
			g.Expect(doc.Revision).To(BeEquivalentTo(1))
			g.Expect(doc.Gate).To(Equal("logistics"))
			g.Expect(doc.Downstream).To(Equal("logistics." + ns + ".example.com"))
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

	It("hands capacity over one acknowledgement at a time while the workload scales 8 → 16 → 4", func(ctx SpecContext) {
		const (
			usable    = 40 // 50 × 80%
			configMap = "gateway-backpressure"
		)
		ns := newNamespace(ctx)
		d := newDeployment(ns, "gateway", 8)
		Expect(k8s.Create(ctx, d)).To(Succeed())
		hpa := newHPA(ns, "gateway", "gateway", 2, 20)
		Expect(k8s.Create(ctx, hpa)).To(Succeed())
		setHPAStatus(ctx, hpa, 8, 8)
		serving := createReadyPods(ctx, ns, "gateway", 8)
		waitCached(ctx, ns, "gateway", 8, 8)
		log := watchDivision(ctx, ns, "logistics")
		pods := watchInFlight(ctx, ns, configMap, "logistics", usable)
		Expect(k8s.Create(ctx, newQuota(ns, "logistics", "gateway", 50))).To(Succeed())

		// settled waits until the serving pods hold every usable permit,
		// base or base+1 each, as both status.division and the document say,
		// and then lets the runtime of each serving pod acknowledge it.
		settled := func(step string, base int) {
			By(step)
			Eventually(func(g Gomega) {
				q := getQuota(ctx, g, ns, "logistics")
				div := divisionOf(g, q)
				g.Expect(replicasOf(g, q).ReadyPods).To(BeEquivalentTo(len(serving)))
				g.Expect(replicasOf(g, q).Divisor).To(BeEquivalentTo(len(serving)))
				g.Expect(replicasOf(g, q).DivisorSource).To(Equal(v1alpha1.DivisorReadyPods))
				c := handedOver(g, q)
				g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
				g.Expect(div.Base).To(BeEquivalentTo(base))
				g.Expect(div.Extra).To(BeEquivalentTo(usable % len(serving)))
				g.Expect(div.HandedOut).To(BeEquivalentTo(usable))
				g.Expect(div.Held).To(BeEquivalentTo(usable))
				doc, _ := publishedDocument(ctx, g, ns, configMap, "logistics")
				g.Expect(doc.Revision).To(Equal(div.Revision))
				sum := 0
				for _, pod := range serving {
					permits := doc.For(pod.Name).Permits
					g.Expect(permits).To(BeElementOf(base, base+1), "pod %s", pod.Name)
					g.Expect(shareOf(div, pod.Name)).To(Equal(v1alpha1.PodShareStatus{Name: pod.Name, Permits: int32(permits)}))
					sum += permits
				}
				g.Expect(sum).To(Equal(usable))
			}).Should(Succeed())
			pods.acknowledge(ctx, serving...)
		}
		settled("steady at 8 Ready pods", 5)

		By("scaling to 16: the new pods start, but hold nothing until they are Ready")
		scaleDeployment(ctx, d, 16)
		setHPAStatus(ctx, hpa, 8, 16)
		starting := make([]*corev1.Pod, 0, 8)
		for i := 8; i < 16; i++ {
			starting = append(starting, createPod(ctx, ns, "gateway", fmt.Sprintf("gateway-%02d", i)))
		}
		var revision int64
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"Spec": BeEquivalentTo(16), "HPADesired": Equal(ptr.To[int32](16)),
				"ExistingPods": BeEquivalentTo(16), "ReadyPods": BeEquivalentTo(8), "Divisor": BeEquivalentTo(8),
			})))
			revision = divisionOf(g, q).Revision
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(divisionOf(g, q).Revision).To(Equal(revision), "the old pods keep their shares")
			doc, _ := publishedDocument(ctx, g, ns, configMap, "logistics")
			g.Expect(doc.For("gateway-00").Permits).To(Equal(5))
		}).WithTimeout(500 * time.Millisecond).Should(Succeed())

		for i, pod := range starting {
			By(fmt.Sprintf("%s turns Ready", pod.Name))
			setReady(ctx, pod)
			serving = append(serving, pod)
			// The pods above the new division's share are told their
			// smaller share at once; the new pod gets nothing yet.
			var shrunk []*corev1.Pod
			Eventually(func(g Gomega) {
				q := getQuota(ctx, g, ns, "logistics")
				g.Expect(replicasOf(g, q).ReadyPods).To(BeEquivalentTo(len(serving)))
				div := divisionOf(g, q)
				doc, _ := publishedDocument(ctx, g, ns, configMap, "logistics")
				g.Expect(doc.Revision).To(Equal(div.Revision))
				mine := shareOf(div, pod.Name)
				g.Expect(mine.Permits).To(BeZero())
				g.Expect(mine.Target).To(HaveValue(BeEquivalentTo(usable / len(serving))))
				g.Expect(doc.For(pod.Name).Permits).To(BeZero())
				shrunk = shrunk[:0]
				for _, p := range serving {
					share := shareOf(div, p.Name)
					if share.Holds == nil {
						continue
					}
					g.Expect(*share.Holds).To(BeNumerically(">", share.Permits))
					g.Expect(doc.For(p.Name).Permits).To(BeEquivalentTo(share.Permits), "pod %s is told its smaller share", p.Name)
					shrunk = append(shrunk, p)
				}
				g.Expect(shrunk).NotTo(BeEmpty())
				c := handedOver(g, q)
				g.Expect(c.Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
				g.Expect(c.Message).To(ContainSubstring(pod.Name))
			}).Should(Succeed())
			Consistently(func(g Gomega) {
				q := getQuota(ctx, g, ns, "logistics")
				g.Expect(shareOf(divisionOf(g, q), pod.Name).Permits).To(BeZero())
			}).WithTimeout(300 * time.Millisecond).Should(Succeed())

			if i == 0 {
				// Each pod that let go of a permit makes room for one.
				for n, p := range shrunk {
					pods.acknowledge(ctx, p)
					Eventually(func(g Gomega) int32 {
						return shareOf(divisionOf(g, getQuota(ctx, g, ns, "logistics")), pod.Name).Permits
					}).Should(BeEquivalentTo(n + 1))
				}
			} else {
				pods.acknowledge(ctx, shrunk...)
			}
			settled(fmt.Sprintf("%d Ready pods", len(serving)), usable/len(serving))
		}

		By("scaling to 4: the leaving pods keep their shares until they release them or are gone")
		scaleDeployment(ctx, d, 4)
		setHPAStatus(ctx, hpa, 16, 4)
		staying, leaving := serving[:4], serving[4:]
		for _, pod := range leaving {
			Expect(k8s.Delete(ctx, pod)).To(Succeed())
		}
		servingPermits := func(div *v1alpha1.DivisionStatus) int32 {
			var sum int32
			for _, pod := range staying {
				sum += shareOf(div, pod.Name).Permits
			}
			return sum
		}
		var kept int32
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "logistics")
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"ExistingPods": BeEquivalentTo(16), "ReadyPods": BeEquivalentTo(4), "Divisor": BeEquivalentTo(4),
			})))
			div := divisionOf(g, q)
			for _, pod := range staying {
				g.Expect(shareOf(div, pod.Name).Target).To(HaveValue(BeEquivalentTo(10)), "pod %s", pod.Name)
			}
			kept = 0
			for _, pod := range leaving {
				share := shareOf(div, pod.Name)
				g.Expect(share.Permits).To(BeNumerically(">=", 2), "pod %s", pod.Name)
				g.Expect(share.Target).To(BeNil())
				kept += share.Permits
			}
			g.Expect(servingPermits(div) + kept).To(BeEquivalentTo(usable))
			g.Expect(handedOver(g, q).Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(servingPermits(divisionOf(g, getQuota(ctx, g, ns, "logistics")))).To(BeEquivalentTo(usable - kept))
		}).WithTimeout(500 * time.Millisecond).Should(Succeed())

		uid := getQuota(ctx, Default, ns, "logistics").UID
		for i, pod := range leaving {
			div := divisionOf(Default, getQuota(ctx, Default, ns, "logistics"))
			before, freed := servingPermits(div), shareOf(div, pod.Name).Permits
			if i%2 == 0 {
				By(fmt.Sprintf("%s releases its %d permits while terminating", pod.Name, freed))
				pods.release(ctx, uid, pod)
			} else {
				By(fmt.Sprintf("%s is gone: its %d permits count until the unacknowledged delay has passed", pod.Name, freed))
				pods.gone(pod)
				releasePod(ctx, pod)
				Eventually(func(g Gomega) {
					div := divisionOf(g, getQuota(ctx, g, ns, "logistics"))
					g.Expect(shareOf(div, pod.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeZero(), "Holds": HaveValue(BeEquivalentTo(freed))}))
					g.Expect(servingPermits(div)).To(Equal(before))
				}).Should(Succeed())
				advance(DefaultUnacknowledgedDelay)
				// Nothing but a reconcile notices that the delay passed;
				// one that read a stale cache steps nothing, so reconcile
				// until the share is settled.
				Eventually(func(g Gomega) {
					_, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "logistics"}})
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(shareOf(divisionOf(g, getQuota(ctx, g, ns, "logistics")), pod.Name).Holds).To(BeNil())
				}).Should(Succeed())
			}
			Eventually(func(g Gomega) {
				div := divisionOf(g, getQuota(ctx, g, ns, "logistics"))
				g.Expect(shareOf(div, pod.Name)).To(Equal(v1alpha1.PodShareStatus{Name: pod.Name}))
				g.Expect(servingPermits(div)).To(Equal(before + freed))
				doc, _ := publishedDocument(ctx, g, ns, configMap, "logistics")
				g.Expect(doc.For(pod.Name).Permits).To(BeZero())
			}).Should(Succeed())
		}
		serving = staying
		settled("4 Ready pods", 10)
		log.verify()
		Expect(pods.verify()).To(Equal(usable), "the pods had every usable permit at some point, never more")

		By("emitting an event with the arithmetic for each change of the division")
		// Which intermediate counts of Ready pods get an event depends on
		// which steps the reconciles saw; each event must state an exact
		// division of the 40 permits over the Ready pods it names.
		arithmetic := regexp.MustCompile(`^PlanChanged: permits (?:\d+→)?(\d+) per pod(?:, \d+ for (\d+) of them)?: Ready pods (?:\d+→)?(\d+); 40 usable permits = (\d+) × (\d+) \+ (\d+)`)
		events := notes(quotaEvents(ctx, Default, ns, "logistics"))
		Expect(events).NotTo(BeEmpty())
		Expect(events[0]).To(Equal("PlanChanged: permits 5 per pod: Ready pods 8; 40 usable permits = 5 × 8 + 0; published to ConfigMap gateway-backpressure"))
		for _, note := range events {
			m := arithmetic.FindStringSubmatch(note)
			Expect(m).NotTo(BeNil(), "event %q", note)
			n := make([]int, len(m))
			for i := 1; i < len(m); i++ {
				n[i], _ = strconv.Atoi(m[i])
			}
			base, extra, pods, a, b, c := n[1], n[2], n[3], n[4], n[5], n[6]
			Expect([]int{a, b, c}).To(Equal([]int{base, pods, extra}), "event %q", note)
			Expect(base*pods+extra).To(Equal(40), "event %q", note)
			Expect(extra).To(BeNumerically("<", pods), "event %q", note)
		}
	})

	It("shares one ConfigMap between the quotas of a workload and removes only a deleted quota's gate", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
		createReadyPods(ctx, ns, "api", 4)
		waitCached(ctx, ns, "api", 4, 4)
		payments, search := newQuota(ns, "payments", "api", 40), newQuota(ns, "search", "api", 8)
		Expect(k8s.Create(ctx, payments)).To(Succeed())
		Expect(k8s.Create(ctx, search)).To(Succeed())

		var searchData string
		Eventually(func(g Gomega) {
			paymentsDoc, cm := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			searchDoc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "search")
			for _, pod := range []string{"api-00", "api-01", "api-02", "api-03"} {
				g.Expect(paymentsDoc.For(pod).Permits).To(Equal(8), "payments, pod %s", pod) // 40 × 80% = 32 = 8 × 4
			}
			// 8 × 80% = 6 = 1 × 4 + 2: the first two pods by name hold one more.
			g.Expect([]int{searchDoc.For("api-00").Permits, searchDoc.For("api-01").Permits, searchDoc.For("api-02").Permits, searchDoc.For("api-03").Permits}).
				To(Equal([]int{2, 2, 1, 1}))
			g.Expect(paymentsDoc.Epoch).NotTo(Equal(searchDoc.Epoch), "each quota's division is its own")
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
		q.Spec.ConfigMapName = "api-gates-backpressure"
		Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, ns, "api-gates-backpressure", "payments")
			g.Expect(doc.Generation).To(BeEquivalentTo(2))
			g.Expect(configMapGone(ctx, g, ns, "api-backpressure")).To(BeTrue())
			g.Expect(getQuota(ctx, g, ns, "payments").Status.ConfigMap).To(HaveValue(HaveField("Name", "api-gates-backpressure")))
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
		pods := createReadyPods(ctx, ns, "api", 3)
		waitCached(ctx, ns, "api", 3, 3)
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())

		var quotaRV, configMapRV string
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(ready(g, q).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(replicasOf(g, q).ReadyPods).To(BeEquivalentTo(3))
			doc, cm := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.For("api-00").Permits).To(Equal(8)) // 30 × 80% = 24 = 8 × 3
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
			g.Expect(replicasOf(g, q).HPADesired).To(Equal(ptr.To[int32](2)))
			g.Expect(replicasOf(g, q).Divisor).To(BeEquivalentTo(3))
			g.Expect(divisionOf(g, q).Revision).To(BeEquivalentTo(1))
		}).Should(Succeed())
		_, cm := publishedDocument(ctx, Default, ns, "api-backpressure", "payments")
		Expect(cm.ResourceVersion).To(Equal(configMapRV))
	})

	It("counts the pods that acknowledged the current plan by its epoch and revision", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 3))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 3)
		a, b, c := pods[0], pods[1], pods[2]
		waitCached(ctx, ns, "api", 3, 3)
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 30))).To(Succeed())

		var current plan.Ack
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(q.Status.ConfigMap).NotTo(BeNil())
			g.Expect(q.Status.Rollout).To(Equal(&v1alpha1.RolloutStatus{Acknowledged: 0, Total: 3, Pending: []string{"api-00", "api-01", "api-02"}}))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Hash).To(Equal(q.Status.ConfigMap.Hash))
			current = plan.AckFor(doc)
			g.Expect(current).To(Equal(plan.Ack{Epoch: string(q.UID), Revision: 1}))
		}).Should(Succeed())

		annotateApplied(ctx, "payments", current.String(), a, b)
		// A document hash, as pods acknowledged before documents had
		// revisions, is no acknowledgement.
		annotateApplied(ctx, "payments", "0123456789abcdef0123456789abcdef", c)
		Eventually(func(g Gomega) *v1alpha1.RolloutStatus {
			return getQuota(ctx, g, ns, "payments").Status.Rollout
		}).Should(Equal(&v1alpha1.RolloutStatus{Acknowledged: 2, Total: 3, Pending: []string{"api-02"}}))

		// The same revision of an earlier incarnation of the quota is not
		// this plan.
		annotateApplied(ctx, "payments", plan.Ack{Epoch: "0f1e2d3c-earlier-quota", Revision: current.Revision}.String(), c)
		Consistently(func(g Gomega) *v1alpha1.RolloutStatus {
			return getQuota(ctx, g, ns, "payments").Status.Rollout
		}).WithTimeout(500 * time.Millisecond).Should(Equal(&v1alpha1.RolloutStatus{Acknowledged: 2, Total: 3, Pending: []string{"api-02"}}))

		annotateApplied(ctx, "payments", current.String(), c)
		Eventually(func(g Gomega) *v1alpha1.RolloutStatus {
			return getQuota(ctx, g, ns, "payments").Status.Rollout
		}).Should(Equal(&v1alpha1.RolloutStatus{Acknowledged: 3, Total: 3}))
	})

	It("reports a named HPA that does not exist, and its replicas once it does, dividing over the Ready pods throughout", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 4))).To(Succeed())
		createReadyPods(ctx, ns, "api", 4)
		waitCached(ctx, ns, "api", 4, 4)
		q := newQuota(ns, "payments", "api", 100)
		q.Spec.HPAName = "api-hpa"
		Expect(k8s.Create(ctx, q)).To(Succeed())
		var revision int64
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonHPANotFound))
			g.Expect(c.Message).To(Equal("HorizontalPodAutoscaler api-hpa not found; Ready pods 4; 80 usable permits = 20 × 4 + 0, published to ConfigMap api-backpressure"))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.For("api-03").Permits).To(Equal(20))
			revision = doc.Revision
		}).Should(Succeed())

		// The HPA wants 10 pods; until they are Ready, the 4 that serve keep
		// every permit.
		hpa := newHPA(ns, "api-hpa", "api", 2, 10)
		Expect(k8s.Create(ctx, hpa)).To(Succeed())
		setHPAStatus(ctx, hpa, 4, 10)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(ready(g, q).Reason).To(Equal(v1alpha1.ReasonPlanPublished))
			g.Expect(q.Status.Replicas).To(HaveValue(MatchFields(IgnoreExtras, Fields{
				"HPAMin": Equal(ptr.To[int32](2)), "HPAMax": Equal(ptr.To[int32](10)),
				"HPACurrent": Equal(ptr.To[int32](4)), "HPADesired": Equal(ptr.To[int32](10)),
				"Divisor": BeEquivalentTo(4), "DivisorSource": Equal(v1alpha1.DivisorReadyPods),
			})))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.For("api-03").Permits).To(Equal(20))
			g.Expect(doc.Revision).To(Equal(revision))
		}).Should(Succeed())
	})

	It("reports a change of the usable permits with its arithmetic, even when the base share stays", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		createReadyPods(ctx, ns, "api", 2)
		waitCached(ctx, ns, "api", 2, 2)
		q := newQuota(ns, "payments", "api", 50)
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) []string {
			return notes(quotaEvents(ctx, g, ns, "payments"))
		}).Should(containsSubstring("PlanChanged: permits 20 per pod: Ready pods 2; 40 usable permits = 20 × 2 + 0"))

		// 52 × 80% = 41: one pod gets one more; the base share stays 20.
		patch := client.MergeFrom(q.DeepCopy())
		q.Spec.Contract.Concurrency = 52
		Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			div := divisionOf(g, getQuota(ctx, g, ns, "payments"))
			g.Expect(div.HandedOut).To(BeEquivalentTo(41))
			g.Expect(notes(quotaEvents(ctx, g, ns, "payments"))).To(
				containsSubstring("PlanChanged: permits 20 per pod, 21 for 1 of them: Ready pods 2; 41 usable permits = 20 × 2 + 1"))
		}).Should(Succeed())
	})

	It("never reassigns the capacity of a pod that does not acknowledge its smaller share, and reports the stall", func(ctx SpecContext) {
		const configMap = "api-backpressure"
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 3))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 2)
		fast, laggard := pods[0], pods[1]
		joining := createPod(ctx, ns, "api", "api-02")
		waitCached(ctx, ns, "api", 3, 2)
		log := watchDivision(ctx, ns, "payments")
		inFlight := watchInFlight(ctx, ns, configMap, "payments", 40)
		q := newQuota(ns, "payments", "api", 50)
		q.Spec.Handover = v1alpha1.Handover{
			StalledAfter: &metav1.Duration{Duration: 2 * time.Second},
			// Shorter than the stall, to show that it does not apply to a
			// pod that acknowledges plans.
			UnacknowledgedDelay: &metav1.Duration{Duration: time.Second},
		}
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			g.Expect(doc.For(fast.Name).Permits).To(Equal(20))
			g.Expect(doc.For(laggard.Name).Permits).To(Equal(20))
		}).Should(Succeed())
		// Both pods acknowledge the plan once: they acknowledge plans.
		inFlight.acknowledge(ctx, fast, laggard)

		By("a third pod turns Ready: 40 = 14 + 13 + 13")
		setReady(ctx, joining)
		Eventually(func(g Gomega) {
			div := divisionOf(g, getQuota(ctx, g, ns, "payments"))
			g.Expect(shareOf(div, fast.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeEquivalentTo(14), "Holds": HaveValue(BeEquivalentTo(20))}))
			g.Expect(shareOf(div, laggard.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeEquivalentTo(13), "Holds": HaveValue(BeEquivalentTo(20))}))
			g.Expect(shareOf(div, joining.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeZero(), "Target": HaveValue(BeEquivalentTo(13))}))
			// The smaller shares are published, so api-00 can apply one.
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			g.Expect(doc.Revision).To(Equal(div.Revision))
			g.Expect(doc.For(fast.Name).Permits).To(Equal(14))
		}).Should(Succeed())
		inFlight.acknowledge(ctx, fast)
		Eventually(func(g Gomega) {
			div := divisionOf(g, getQuota(ctx, g, ns, "payments"))
			g.Expect(shareOf(div, fast.Name).Holds).To(BeNil())
			g.Expect(shareOf(div, joining.Name).Permits).To(BeEquivalentTo(6), "the 6 permits api-00 let go of")
		}).Should(Succeed())

		By("the laggard's smaller share stays unacknowledged past spec.handover.stalledAfter")
		advance(3 * time.Second)
		var stalled metav1.Condition
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			stalled = handedOver(g, q)
			g.Expect(stalled.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(stalled.Reason).To(Equal(v1alpha1.ReasonHandoverStalled))
			g.Expect(stalled.Message).To(Equal("pods api-01 have not acknowledged their smaller share; their old share stays counted, so pods api-02 wait for it"))
			div := divisionOf(g, q)
			g.Expect(div.Pods).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Name": Equal(laggard.Name), "Permits": BeEquivalentTo(13), "Holds": HaveValue(BeEquivalentTo(20)),
				"ShrunkAtRevision": BeNumerically(">=", 2), "ShrunkAt": Not(BeNil()),
			})))
			g.Expect(div.Held).To(BeEquivalentTo(40))
			g.Expect(div.HandedOut).To(BeEquivalentTo(33))
			var warnings []string
			for _, e := range quotaEvents(ctx, g, ns, "payments") {
				if e.Type == corev1.EventTypeWarning {
					warnings = append(warnings, e.Reason+": "+e.Note)
				}
			}
			g.Expect(warnings).To(ConsistOf("HandoverStalled: " + stalled.Message))
		}).Should(Succeed())

		By("long after every delay, the laggard's old share is still counted and api-02 still waits")
		advance(10 * time.Minute) // the default unacknowledgedDelay is 150s
		Consistently(func(g Gomega) {
			_, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "payments"}})
			g.Expect(err).NotTo(HaveOccurred())
			q := getQuota(ctx, g, ns, "payments")
			div := divisionOf(g, q)
			g.Expect(shareOf(div, joining.Name).Permits).To(BeEquivalentTo(6))
			g.Expect(shareOf(div, laggard.Name).Holds).To(HaveValue(BeEquivalentTo(20)))
			g.Expect(handedOver(g, q).Reason).To(Equal(v1alpha1.ReasonHandoverStalled))
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			g.Expect(doc.For(joining.Name).Permits).To(Equal(6))
		}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		// The stall is reported once, not at every reconcile.
		stalls := 0
		for _, e := range quotaEvents(ctx, Default, ns, "payments") {
			if e.Reason == v1alpha1.ReasonHandoverStalled {
				stalls++
				Expect(e.Series).To(BeNil(), "the stall event repeated")
			}
		}
		Expect(stalls).To(Equal(1))

		By("the laggard acknowledges at last, and its capacity moves")
		inFlight.acknowledge(ctx, laggard)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			div := divisionOf(g, q)
			g.Expect(shareOf(div, joining.Name).Permits).To(BeEquivalentTo(13))
			g.Expect(div.HandedOut).To(BeEquivalentTo(40))
		}).Should(Succeed())
		log.verify()
		Expect(inFlight.verify()).To(Equal(40))
	})

	It("frees the old share of a pod that never acknowledges once spec.handover.unacknowledgedDelay has passed", func(ctx SpecContext) {
		const configMap = "api-backpressure"
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		silent := createReadyPods(ctx, ns, "api", 1)[0]
		joining := createPod(ctx, ns, "api", "api-01")
		waitCached(ctx, ns, "api", 2, 1)
		log := watchDivision(ctx, ns, "payments")
		q := newQuota(ns, "payments", "api", 50)
		q.Spec.Handover = v1alpha1.Handover{UnacknowledgedDelay: &metav1.Duration{Duration: 2 * time.Second}}
		Expect(k8s.Create(ctx, q)).To(Succeed())
		Eventually(func(g Gomega) int {
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			return doc.For(silent.Name).Permits
		}).Should(Equal(40))

		setReady(ctx, joining)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			div := divisionOf(g, q)
			g.Expect(shareOf(div, silent.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeEquivalentTo(20), "Holds": HaveValue(BeEquivalentTo(40))}))
			g.Expect(shareOf(div, joining.Name)).To(MatchFields(IgnoreExtras, Fields{"Permits": BeZero(), "Target": HaveValue(BeEquivalentTo(20))}))
			// It never acknowledged anything: it is waited for, not stalled.
			g.Expect(handedOver(g, q).Reason).To(Equal(v1alpha1.ReasonHandoverInProgress))
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			g.Expect(doc.For(silent.Name).Permits).To(Equal(20))
			// The operator's cache has the document too: the delay counts
			// from when the operator sees the smaller share published,
			// and the clock is about to move.
			cached := &corev1.ConfigMap{}
			g.Expect(operatorCache.Get(ctx, client.ObjectKey{Namespace: ns, Name: configMap}, cached)).To(Succeed())
			seen, err := plan.Parse([]byte(cached.Data[plan.KeyFor("payments")]))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(seen.Revision).To(Equal(doc.Revision))
		}).Should(Succeed())

		By("short of the delay, nothing moves")
		advance(1900 * time.Millisecond)
		Consistently(func(g Gomega) {
			_, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "payments"}})
			g.Expect(err).NotTo(HaveOccurred())
			div := divisionOf(g, getQuota(ctx, g, ns, "payments"))
			g.Expect(shareOf(div, joining.Name).Permits).To(BeZero())
			g.Expect(shareOf(div, silent.Name).Holds).To(HaveValue(BeEquivalentTo(40)))
		}).WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		By("once the delay has passed, the old share is freed and granted")
		advance(200 * time.Millisecond)
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			div := divisionOf(g, q)
			g.Expect(shareOf(div, silent.Name)).To(Equal(v1alpha1.PodShareStatus{Name: silent.Name, Permits: 20}))
			g.Expect(shareOf(div, joining.Name)).To(Equal(v1alpha1.PodShareStatus{Name: joining.Name, Permits: 20}))
			doc, _ := publishedDocument(ctx, g, ns, configMap, "payments")
			g.Expect(doc.For(joining.Name).Permits).To(Equal(20))
		}).Should(Succeed())
		Expect(notes(quotaEvents(ctx, Default, ns, "payments"))).NotTo(containsSubstring(v1alpha1.ReasonHandoverStalled))
		log.verify()
	})

	It("hands 40 permits to 40 of 50 Ready pods under Strict, and one to every pod under AtLeastOne", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 50))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 50)
		waitCached(ctx, ns, "api", 50, 50)
		log := watchDivision(ctx, ns, "payments")
		q := newQuota(ns, "payments", "api", 50)
		Expect(k8s.Create(ctx, q)).To(Succeed())
		// counts returns how many pods the document gives each number of
		// permits.
		counts := func(doc plan.Document) map[int]int {
			out := map[int]int{}
			for _, pod := range pods {
				out[doc.For(pod.Name).Permits]++
			}
			return out
		}

		By("Strict: 50 × 80% = 40 permits, one each for 40 pods")
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonQuotaTooSmall))
			g.Expect(c.Message).To(And(ContainSubstring("50 × 80% = 40 permits"),
				ContainSubstring("Strict gives 40 of the pods 1 permit each and leaves the other 10 at 0")))
			div := divisionOf(g, q)
			g.Expect(div).To(PointTo(MatchFields(IgnoreExtras, Fields{
				"Revision": BeEquivalentTo(1), "Usable": BeEquivalentTo(40), "Base": BeZero(), "Extra": BeEquivalentTo(40),
				"HandedOut": BeEquivalentTo(40), "Held": BeEquivalentTo(40),
				"Shares": Equal([]v1alpha1.ShareCount{{Permits: 1, Pods: 40}}), "Pods": HaveLen(40),
			})))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Permits).To(BeZero())
			g.Expect(counts(doc)).To(Equal(map[int]int{1: 40, 0: 10}))
		}).Should(Succeed())

		By("AtLeastOne: every pod holds 1, 50 in all, and the over-commitment is reported")
		patch := client.MergeFrom(q.DeepCopy())
		q.Spec.BelowOne = v1alpha1.BelowOneAtLeastOne
		Expect(k8s.Patch(ctx, q, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			c := ready(g, q)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(v1alpha1.ReasonOvercommitted))
			g.Expect(c.Message).To(ContainSubstring("AtLeastOne raised every pod to 1 permit, so the pods together hold up to 50 in flight against a contract of 50"))
			div := divisionOf(g, q)
			g.Expect(div).To(PointTo(MatchFields(IgnoreExtras, Fields{
				"HandedOut": BeEquivalentTo(50), "Held": BeEquivalentTo(50),
				"Shares": Equal([]v1alpha1.ShareCount{{Permits: 1, Pods: 50}}), "Pods": HaveLen(50),
			})))
			g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(counts(doc)).To(Equal(map[int]int{1: 50}))
		}).Should(Succeed())
		log.verify()
	})
})
