package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// sharedContract creates a cluster-scoped contract of concurrency at 80%,
// named after the spec's namespace, deleted when the spec ends.
func sharedContract(ctx context.Context, ns string, concurrency int32) *v1alpha1.DownstreamContract {
	dc := &v1alpha1.DownstreamContract{
		ObjectMeta: metav1.ObjectMeta{Name: "contract-" + ns},
		Spec: v1alpha1.DownstreamContractSpec{
			// Every namespace: a contract without a selector admits none.
			NamespaceSelector: &metav1.LabelSelector{},
			Downstream:        "contract-" + ns + ".example.com",
			Contract:          v1alpha1.Contract{Concurrency: concurrency},
		},
	}
	Expect(k8s.Create(ctx, dc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, dc))).To(Succeed()) })
	return dc
}

// sharingQuota returns a quota named name of the Deployment workload that
// shares dc, with demand in flight when it is positive.
func sharingQuota(ns, name string, dc *v1alpha1.DownstreamContract, demand int32) *v1alpha1.DownstreamQuota {
	q := &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "api"},
			Downstream:  dc.Spec.Downstream,
			ContractRef: &v1alpha1.ContractReference{Name: dc.Name},
			Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 100 * time.Millisecond}},
			Deadline:    metav1.Duration{Duration: time.Second},
		},
	}
	if demand > 0 {
		q.Spec.Demand = &v1alpha1.Demand{InFlight: ptr.To(demand)}
	}
	return q
}

// revisionLog records every revision of an object's status.division the
// API server stores, through a watch, and reports one that goes back.
type revisionLog struct {
	mu        sync.Mutex
	revisions []int64
	problems  []string
}

// watchRevisions starts a revisionLog on the objects of list (in ns, or
// cluster-wide when ns is empty) named name; division reads an object's
// division.
func watchRevisions(ctx context.Context, list client.ObjectList, ns, name string, division func(client.Object) *v1alpha1.DivisionStatus) *revisionLog {
	var opts []client.ListOption
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	w, err := k8s.Watch(ctx, list, opts...)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	l := &revisionLog{}
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(client.Object)
			if !ok || ev.Type == watch.Error || obj.GetName() != name {
				continue
			}
			d := division(obj)
			if d == nil {
				continue
			}
			l.mu.Lock()
			if n := len(l.revisions); n > 0 && d.Revision < l.revisions[n-1] {
				l.problems = append(l.problems, fmt.Sprintf("resourceVersion %s: revision went back from %d to %d", obj.GetResourceVersion(), l.revisions[n-1], d.Revision))
			}
			l.revisions = append(l.revisions, d.Revision)
			l.mu.Unlock()
		}
	}()
	return l
}

// watchDocuments starts a revisionLog on the revisions of gate's document
// in the ConfigMap name of ns.
func watchDocuments(ctx context.Context, ns, name, gate string) *revisionLog {
	w, err := k8s.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(w.Stop)
	l := &revisionLog{}
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || cm.Name != name || ev.Type == watch.Deleted {
				continue
			}
			d, err := plan.Parse([]byte(cm.Data[plan.KeyFor(gate)]))
			if err != nil {
				continue
			}
			l.mu.Lock()
			if n := len(l.revisions); n > 0 && d.Revision < l.revisions[n-1] {
				l.problems = append(l.problems, fmt.Sprintf("ConfigMap resourceVersion %s: document revision went back from %d to %d", cm.ResourceVersion, l.revisions[n-1], d.Revision))
			}
			l.revisions = append(l.revisions, d.Revision)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *revisionLog) verify() {
	l.mu.Lock()
	defer l.mu.Unlock()
	Expect(l.problems).To(BeEmpty())
	Expect(l.revisions).NotTo(BeEmpty())
}

// staleReads returns a client that reads as the manager does, from its
// cache, but the object of key as stale has it; it writes to the API server
// as the tests' own client does.
func staleReads(key client.ObjectKey, stale client.Object) client.Client {
	c, err := client.New(testEnv.Config, client.Options{Scheme: k8s.Scheme(), Cache: &client.CacheOptions{Reader: operatorCache}})
	Expect(err).NotTo(HaveOccurred())
	return staleClient{Client: c, key: key, stale: stale}
}

// staleClient is a client whose Get of one object returns a stale copy.
type staleClient struct {
	client.Client
	key   client.ObjectKey
	stale client.Object
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == c.key {
		switch o := obj.(type) {
		case *v1alpha1.DownstreamQuota:
			c.stale.(*v1alpha1.DownstreamQuota).DeepCopyInto(o)
			return nil
		case *v1alpha1.DownstreamContract:
			c.stale.(*v1alpha1.DownstreamContract).DeepCopyInto(o)
			return nil
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

var _ = Describe("The guarantee against a real API server", func() {
	It("divides one contract between two quotas of one workload, each gate its own part", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dc := sharedContract(ctx, ns, 60) // 48 usable
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 2)
		Expect(k8s.Create(ctx, sharingQuota(ns, "ledger-read", dc, 8))).To(Succeed())
		Expect(k8s.Create(ctx, sharingQuota(ns, "ledger-write", dc, 0))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getContract(ctx, g, dc.Name)
			current := fmt.Sprintf("%s/%d", got.UID, got.Status.Division.Revision)
			ackShared(ctx, "ledger-read", current, pods...)
			ackShared(ctx, "ledger-write", current, pods...)
			read, _ := publishedDocument(ctx, g, ns, "api-backpressure", "ledger-read")
			write, _ := publishedDocument(ctx, g, ns, "api-backpressure", "ledger-write")
			g.Expect([]int{read.For("api-00").Permits, read.For("api-01").Permits, write.For("api-00").Permits, write.For("api-01").Permits}).
				To(Equal([]int{4, 4, 20, 20}))
			g.Expect(got.Status.Division.HandedOut).To(BeEquivalentTo(48))
		}).Should(Succeed())
	})

	It("never puts an older record or document back from a quota's stale cache", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 3)
		setNotReady(ctx, pods[2])
		waitCached(ctx, ns, "api", 3, 2)
		log := watchRevisions(ctx, &v1alpha1.DownstreamQuotaList{}, ns, "payments", func(o client.Object) *v1alpha1.DivisionStatus {
			return o.(*v1alpha1.DownstreamQuota).Status.Division
		})
		docs := watchDocuments(ctx, ns, "api-backpressure", "payments")
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 50))).To(Succeed())
		var stale *v1alpha1.DownstreamQuota
		Eventually(func(g Gomega) {
			stale = getQuota(ctx, g, ns, "payments")
			g.Expect(stale.Status.Division).NotTo(BeNil())
			g.Expect(stale.Status.ConfigMap).NotTo(BeNil())
		}).Should(Succeed())
		// The third pod comes and goes; the pods acknowledge each step.
		setReady(ctx, pods[2])
		settleQuota(ctx, ns, "payments", pods...)
		setNotReady(ctx, pods[2])
		settleQuota(ctx, ns, "payments", pods...)
		live := getQuota(ctx, Default, ns, "payments")
		Expect(live.Status.Division.Revision).To(BeNumerically(">", stale.Status.Division.Revision))
		doc, _ := publishedDocument(ctx, Default, ns, "api-backpressure", "payments")

		r := NewDownstreamQuotaReconciler(NewPublisher(staleReads(client.ObjectKeyFromObject(live), stale), k8s, noEvents{}, WithClock(fakeClock), WithClockID("envtest")))
		for range 3 {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(live)})
			Expect(err).NotTo(HaveOccurred())
		}
		after, _ := publishedDocument(ctx, Default, ns, "api-backpressure", "payments")
		Expect(after.Revision).To(BeNumerically(">=", doc.Revision), "a document of revision %d replaced revision %d", after.Revision, doc.Revision)
		Expect(getQuota(ctx, Default, ns, "payments").Status.Division.Revision).To(BeNumerically(">=", live.Status.Division.Revision))
		log.verify()
		docs.verify()
	})

	It("never puts an older record or document back from a contract's stale cache", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dc := sharedContract(ctx, ns, 50)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 2))).To(Succeed())
		pods := createReadyPods(ctx, ns, "api", 3)
		setNotReady(ctx, pods[2])
		waitCached(ctx, ns, "api", 3, 2)
		log := watchRevisions(ctx, &v1alpha1.DownstreamContractList{}, "", dc.Name, func(o client.Object) *v1alpha1.DivisionStatus {
			return o.(*v1alpha1.DownstreamContract).Status.Division
		})
		docs := watchDocuments(ctx, ns, "api-backpressure", "payments")
		Expect(k8s.Create(ctx, sharingQuota(ns, "payments", dc, 0))).To(Succeed())
		settleContract(ctx, dc.Name, ns, "payments", pods[:2]...)
		stale := getContract(ctx, Default, dc.Name)
		setReady(ctx, pods[2])
		settleContract(ctx, dc.Name, ns, "payments", pods...)
		setNotReady(ctx, pods[2])
		settleContract(ctx, dc.Name, ns, "payments", pods...)
		live := getContract(ctx, Default, dc.Name)
		Expect(live.Status.Division.Revision).To(BeNumerically(">", stale.Status.Division.Revision))

		r := NewDownstreamContractReconciler(NewPublisher(staleReads(client.ObjectKeyFromObject(live), stale), k8s, noEvents{}, WithClock(fakeClock), WithClockID("envtest")))
		for range 3 {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(live)})
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(getContract(ctx, Default, dc.Name).Status.Division.Revision).To(BeNumerically(">=", live.Status.Division.Revision))
		log.verify()
		docs.verify()
	})

	It("stores a division's record and its compact document at the operator's size limits", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// No workload: the operator leaves the record the spec writes.
		q := newQuota(ns, "payments", "missing", 50)
		Expect(k8s.Create(ctx, q)).To(Succeed())
		pods := maxRecorded("")
		st := recordOfPods(pods, "")
		Expect(recordTooLarge(st)).To(BeEmpty())
		st.Epoch, st.Revision, st.Usable = string(q.UID), 1, 40
		Eventually(func(g Gomega) {
			got := getQuota(ctx, g, ns, "payments")
			got.Status.Division = st
			g.Expect(k8s.Status().Update(ctx, got)).To(Succeed())
		}).Should(Succeed())
		Expect(recordPods(getQuota(ctx, Default, ns, "payments").Status.Division)).To(Equal(pods))

		// 30,000 pods in a compact document fit the ConfigMap's 1 MiB;
		// 9,000 in version 2 do not.
		write := func(version, pods int) error {
			d := plan.Document{Version: version, Gate: "payments", Epoch: "e", Revision: 1, Pods: map[string]plan.PodShare{}}
			for i := range pods {
				d.Pods[deploymentPodName(i)] = plan.PodShare{Permits: 3 + i%2, Workers: 1}
			}
			d.Hash = plan.Hash(d)
			data, err := plan.Marshal(d)
			Expect(err).NotTo(HaveOccurred())
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("v%d", version)},
				Data: map[string]string{plan.KeyFor(d.Gate): string(data)}}
			return k8s.Create(ctx, cm)
		}
		Expect(write(plan.CompactVersion, 30000)).To(Succeed())
		Expect(write(plan.CurrentVersion, 9000)).To(MatchError(ContainSubstring("may not be more than 1048576 bytes")))
	})

	It("puts back a hand-edited document of a quota that shares a contract", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		dc := sharedContract(ctx, ns, 50)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 1))).To(Succeed())
		createReadyPods(ctx, ns, "api", 1)
		Expect(k8s.Create(ctx, sharingQuota(ns, "payments", dc, 0))).To(Succeed())
		var published string
		Eventually(func(g Gomega) {
			q := getQuota(ctx, g, ns, "payments")
			g.Expect(q.Status.ConfigMap).NotTo(BeNil())
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Hash).To(Equal(q.Status.ConfigMap.Hash))
			published = doc.Hash
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api-backpressure"}, cm)).To(Succeed())
			doc, err := plan.Parse([]byte(cm.Data[plan.KeyFor("payments")]))
			g.Expect(err).NotTo(HaveOccurred())
			doc.Pods = map[string]plan.PodShare{"api-00": {Permits: 500, Workers: 500}}
			doc.Hash = plan.Hash(doc)
			data, err := plan.Marshal(doc)
			g.Expect(err).NotTo(HaveOccurred())
			cm.Data[plan.KeyFor("payments")] = string(data)
			g.Expect(k8s.Update(ctx, cm)).To(Succeed())
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", "payments")
			g.Expect(doc.Hash).To(Equal(published))
		}).Should(Succeed())
	})
})

// setNotReady plays the kubelet: the pods fail their readiness probe.
func setNotReady(ctx context.Context, pods ...*corev1.Pod) {
	for _, pod := range pods {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		Expect(k8s.Status().Patch(ctx, pod, patch)).To(Succeed())
	}
}

// settleQuota acknowledges the quota's published revision on the pods
// until the handover is done.
func settleQuota(ctx context.Context, ns, quota string, pods ...*corev1.Pod) {
	Eventually(func(g Gomega) {
		q := getQuota(ctx, g, ns, quota)
		g.Expect(q.Status.ConfigMap).NotTo(BeNil())
		doc, _ := publishedDocument(ctx, g, ns, q.Spec.WorkloadRef.Name+v1alpha1.ConfigMapSuffix, quota)
		ackShared(ctx, quota, plan.AckFor(doc).String(), pods...)
		g.Expect(handedOver(g, q).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(q.Status.Division.Revision).To(Equal(doc.Revision))
	}).Should(Succeed())
}

// settleContract acknowledges a sharing quota's published revision on the
// pods until the contract's handover is done.
func settleContract(ctx context.Context, contract, ns, quota string, pods ...*corev1.Pod) {
	Eventually(func(g Gomega) {
		dc := getContract(ctx, g, contract)
		doc, _ := publishedDocument(ctx, g, ns, "api-backpressure", quota)
		ackShared(ctx, quota, plan.AckFor(doc).String(), pods...)
		c := findCondition(dc.Status.Conditions, v1alpha1.ConditionHandedOver)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(dc.Status.Division.Revision).To(Equal(doc.Revision))
	}).Should(Succeed())
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// noEvents is an events.EventRecorder that records nothing.
type noEvents struct{}

func (noEvents) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
}
