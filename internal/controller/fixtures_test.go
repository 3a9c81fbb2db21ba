package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/metricstest"
)

// testFinalizer keeps a deleted pod terminating until the test, playing the
// kubelet, lets it go.
const testFinalizer = "test.backpressure.dev/terminating"

var namespaceSeq atomic.Int32

// newNamespace creates a namespace of its own for one spec.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("t%d-%d", GinkgoParallelProcess(), namespaceSeq.Add(1))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// newDeployment returns a Deployment of replicas whose pods carry
// app=<name>.
func newDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	return builders.MakeDeployment(ns, name).Replicas(replicas).Obj()
}

// newQuota returns a quota of concurrency over the Deployment workload, at
// the default 80% safety. Its downstream, <name>.<namespace>.example.com,
// is its own: quotas of one downstream that do not share a contract are
// checked against each other, and the specs' namespaces are never deleted.
func newQuota(ns, name, workload string, concurrency int32) *v1alpha1.DownstreamQuota {
	return builders.MakeQuota(ns, name).Workload("Deployment", workload).Concurrency(concurrency).Obj()
}

// newHPA returns an HPA on the Deployment workload.
func newHPA(ns, name, workload string, minReplicas, maxReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return builders.MakeHPA(ns, name).Target("Deployment", workload).Replicas(minReplicas, maxReplicas).Obj()
}

// createPod creates a pod of the Deployment workload, held by the test
// finalizer so that deleting it leaves it terminating.
func createPod(ctx context.Context, ns, workload, name string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:     map[string]string{"app": workload},
			Finalizers: []string{testFinalizer},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	return pod
}

// releasePod removes the test finalizer, so a deleted pod goes.
func releasePod(ctx context.Context, pod *corev1.Pod) {
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(f string) bool { return f == testFinalizer })
	Expect(k8s.Update(ctx, pod)).To(Succeed())
}

// scaleDeployment sets spec.replicas through the scale subresource, as the
// HPA does.
func scaleDeployment(ctx context.Context, d *appsv1.Deployment, replicas int32) {
	scale := &autoscalingv1.Scale{}
	Expect(k8s.SubResource("scale").Get(ctx, d, scale)).To(Succeed())
	scale.Spec.Replicas = replicas
	Expect(k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale))).To(Succeed())
}

// setHPAStatus writes the HPA's status, as the HPA controller does after it
// scaled the workload.
func setHPAStatus(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32) {
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hpa), hpa)).To(Succeed())
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired}
	Expect(k8s.Status().Update(ctx, hpa)).To(Succeed())
}

// getQuota reads a quota.
func getQuota(ctx context.Context, g Gomega, ns, name string) *v1alpha1.DownstreamQuota {
	q := &v1alpha1.DownstreamQuota{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, q)).To(Succeed())
	return q
}

// replicasOf returns q's status.replicas, failing when there is none: the
// division is recorded before the rest of the status, so a status may have
// one without the other.
func replicasOf(g Gomega, q *v1alpha1.DownstreamQuota) *v1alpha1.ReplicaStatus {
	g.Expect(q.Status.Replicas).NotTo(BeNil(), "quota %s has no status.replicas", q.Name)
	return q.Status.Replicas
}

// ready returns q's Ready condition, failing when there is none.
func ready(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
	g.Expect(c).NotTo(BeNil(), "quota %s has no Ready condition", q.Name)
	return *c
}

// publishedDocument reads quota's document from the ConfigMap.
func publishedDocument(ctx context.Context, g Gomega, ns, configMap, quota string) (plan.Document, *corev1.ConfigMap) {
	cm := &corev1.ConfigMap{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: configMap}, cm)).To(Succeed())
	data, ok := cm.Data[plan.KeyFor(quota)]
	g.Expect(ok).To(BeTrue(), "ConfigMap %s has no key for %s; keys: %v", configMap, quota, keys(cm.Data))
	doc, err := plan.Parse([]byte(data))
	g.Expect(err).NotTo(HaveOccurred())
	return doc, cm
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// configMapGone reports whether the ConfigMap does not exist.
func configMapGone(ctx context.Context, g Gomega, ns, name string) bool {
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	return apierrors.IsNotFound(err)
}

// quotaEvents lists the events.k8s.io events about a quota, oldest first.
func quotaEvents(ctx context.Context, g Gomega, ns, quota string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "DownstreamQuota" && e.Regarding.Name == quota {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// notes returns the reason and note of each event, "Reason: note".
func notes(events []eventsv1.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out
}

// annotateApplied sets the pods' acknowledgement of quota to value, as the
// runtime library does.
func annotateApplied(ctx context.Context, quota, value string, pods ...*corev1.Pod) {
	for _, pod := range pods {
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[appliedAnnotation(quota)] = value
		Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())
	}
}

// release plays the runtime library of a terminating pod that closed its
// gate and drained: it hands quota's share back.
func release(ctx context.Context, quota string, uid types.UID, pods ...*corev1.Pod) {
	annotateApplied(ctx, quota, plan.Ack{Epoch: string(uid), Released: true}.String(), pods...)
}

// setReady plays the kubelet: the pods run and pass their readiness probe.
func setReady(ctx context.Context, pods ...*corev1.Pod) {
	for _, pod := range pods {
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		Expect(k8s.Status().Patch(ctx, pod, patch)).To(Succeed())
	}
}

// createReadyPods creates n pods of the workload, named <workload>-00,
// <workload>-01, ..., and makes them Ready.
func createReadyPods(ctx context.Context, ns, workload string, n int) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pod := createPod(ctx, ns, workload, fmt.Sprintf("%s-%02d", workload, i))
		setReady(ctx, pod)
		pods = append(pods, pod)
	}
	return pods
}

// waitCached waits until the operator's cache holds existing pods of the
// workload, ready of them serving (Ready, not terminating). A quota created
// after it is first divided over exactly those pods.
func waitCached(ctx context.Context, ns, workload string, existing, ready int) {
	Eventually(func(g Gomega) {
		var list corev1.PodList
		g.Expect(operatorCache.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": workload})).To(Succeed())
		serving := 0
		for i := range list.Items {
			if podServing(&list.Items[i]) {
				serving++
			}
		}
		g.Expect(list.Items).To(HaveLen(existing))
		g.Expect(serving).To(Equal(ready))
	}).Should(Succeed())
}

// advance moves the reconciler's clock on: spec.handover's delays are
// measured on it.
func advance(d time.Duration) { fakeClock.SetTime(fakeClock.Now().Add(d)) }

// advanceIdle moves the reconciler's clock on, then waits until the
// quota controller has no reconcile running or queued. A reconcile that
// began before the advance computed its conditions at the old time (the
// demand it read, the delays that had passed); a direct reconcile at the
// new time that wrote first would have its status rebased over by that one
// (writeStatus keeps a write whose division record is unchanged), and no
// event would follow to correct it.
func advanceIdle(d time.Duration) {
	GinkgoHelper()
	advance(d)
	Eventually(func(g Gomega) {
		busy := 0.0
		for _, m := range []struct{ family, label string }{{"controller_runtime_active_workers", "controller"}, {"workqueue_depth", "name"}} {
			n, found, err := metricstest.Sum(m.family, m.label, ControllerName)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(found).To(BeTrue(), "%s of %s among the manager's metrics", m.family, ControllerName)
			busy += n
		}
		g.Expect(busy).To(BeZero(), "reconciles of %s running or queued", ControllerName)
	}).Should(Succeed())
}

// reconcileFresh reconciles the quota ns/name directly until a reconcile
// steps it: one that read a stale cache writes nothing and asks to be run
// again soon, and a direct call's request to run again reaches no work
// queue.
func reconcileFresh(ctx context.Context, ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		res, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.RequeueAfter).NotTo(Equal(staleRecheck), "the reconcile read a stale cache")
	}).Should(Succeed())
}

// divisionOf returns q's status.division, failing when there is none.
func divisionOf(g Gomega, q *v1alpha1.DownstreamQuota) *v1alpha1.DivisionStatus {
	g.Expect(q.Status.Division).NotTo(BeNil(), "quota %s has no status.division", q.Name)
	return q.Status.Division
}

// shareOf returns pod's entry in div; the zero entry (nothing told, nothing
// held) when the pod is not listed.
func shareOf(div *v1alpha1.DivisionStatus, pod string) v1alpha1.PodShareStatus {
	for _, p := range div.Pods {
		if p.Name == pod {
			return p
		}
	}
	return v1alpha1.PodShareStatus{Name: pod}
}

// bound is the most the pod may have in flight: the larger of what it is
// told and what it may still hold.
func bound(p v1alpha1.PodShareStatus) int32 { return max(p.Permits, ptr.Deref(p.Holds, 0)) }

// handedOver returns q's HandedOver condition, failing when there is none.
func handedOver(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionHandedOver)
	g.Expect(c).NotTo(BeNil(), "quota %s has no HandedOver condition", q.Name)
	return *c
}

// divisionLog records every status.division the API server stores for one
// quota, through a watch, and checks each against the handover's
// invariants: the pods may hold at most the usable permits (Σ over pods of
// max(permits, holds) ≤ usable), the totals agree with the pods listed, and
// the revision never goes back.
type divisionLog struct {
	mu       sync.Mutex
	history  []v1alpha1.DivisionStatus
	problems []string
	ended    bool
	stopped  atomic.Bool
}

// watchDivision starts a divisionLog for quota; start it before the quota
// exists to see every status it ever has.
func watchDivision(ctx context.Context, ns, quota string) *divisionLog {
	w, err := k8s.Watch(ctx, &v1alpha1.DownstreamQuotaList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	l := &divisionLog{}
	DeferCleanup(func() {
		l.stopped.Store(true)
		w.Stop()
	})
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				l.problem("watch error: %v", ev.Object)
				continue
			}
			if q, ok := ev.Object.(*v1alpha1.DownstreamQuota); ok && q.Name == quota && q.Status.Division != nil {
				l.observe(q.ResourceVersion, *q.Status.Division.DeepCopy())
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ended = !l.stopped.Load()
	}()
	return l
}

func (l *divisionLog) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

func (l *divisionLog) observe(rv string, div v1alpha1.DivisionStatus) {
	var held, told int32
	for _, p := range div.Pods {
		held += bound(p)
		told += p.Permits
		if p.Holds != nil && (p.ShrunkAtRevision < 1 || p.ShrunkAtRevision > div.Revision) {
			l.problem("resourceVersion %s: pod %s holds %d since revision %d, outside 1..%d", rv, p.Name, *p.Holds, p.ShrunkAtRevision, div.Revision)
		}
	}
	if held > div.Usable {
		l.problem("resourceVersion %s revision %d: pods may hold %d > %d usable: %+v", rv, div.Revision, held, div.Usable, div.Pods)
	}
	if held != div.Held || told != div.HandedOut {
		l.problem("resourceVersion %s revision %d: held %d and handedOut %d, but the pods listed hold %d and are told %d", rv, div.Revision, div.Held, div.HandedOut, held, told)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.history); n > 0 && l.history[n-1].Epoch == div.Epoch && l.history[n-1].Revision > div.Revision {
		l.problems = append(l.problems, fmt.Sprintf("resourceVersion %s: revision went back from %d to %d", rv, l.history[n-1].Revision, div.Revision))
	}
	l.history = append(l.history, div)
}

// verify checks that the log saw statuses, none breaking an invariant, and
// that its watch did not end early.
func (l *divisionLog) verify() {
	l.mu.Lock()
	defer l.mu.Unlock()
	Expect(l.problems).To(BeEmpty())
	Expect(l.ended).To(BeFalse(), "the watch ended before the spec did; statuses may have been missed")
	Expect(l.history).NotTo(BeEmpty())
	GinkgoWriter.Printf("division log: %d statuses checked\n", len(l.history))
}

// containsSubstring matches a string slice with an element containing s.
func containsSubstring(s string) OmegaMatcher {
	return ContainElement(ContainSubstring(s))
}

// settledWrites waits until the manager's count of writes to namespace
// holds still for half a second, and returns it.
func settledWrites(namespace string) int {
	last := -1
	Eventually(func() bool {
		n := writes.TotalIn(namespace)
		still := n == last
		last = n
		return still
	}).WithPolling(500 * time.Millisecond).Should(BeTrue())
	return last
}

// podModel is what the test knows of one pod's runtime: the document it
// last acknowledged, and whether it released its share or is gone.
type podModel struct {
	// ackedAt is the ConfigMap resourceVersion the acknowledged document
	// was read at; 0 when the pod never acknowledged.
	ackedAt  int64
	acked    int
	released bool
}

// inFlightModel checks the handover from the pods' side, independently of
// the operator's own record: it watches every version of a quota's
// published document and knows every acknowledgement the test made. A pod
// may have in flight what the document it acknowledged gives it, or more if
// a document published since gives it more; a pod that never acknowledged,
// the most any document ever gave it; a pod that released its share or is
// gone, nothing. After every published document the sum over pods must stay
// within the usable permits.
type inFlightModel struct {
	ns, configMap, quota string
	usable               int

	mu       sync.Mutex
	docs     []publishedVersion
	pods     map[string]*podModel
	peak     int
	problems []string
	stopped  atomic.Bool
	ended    bool
}

// publishedVersion is one version of the document, with the ConfigMap
// resourceVersion it was written at.
type publishedVersion struct {
	rv  int64
	doc plan.Document
}

// watchInFlight starts an inFlightModel; start it before the quota exists.
func watchInFlight(ctx context.Context, ns, configMap, quota string, usable int) *inFlightModel {
	w, err := k8s.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	m := &inFlightModel{ns: ns, configMap: configMap, quota: quota, usable: usable, pods: map[string]*podModel{}}
	DeferCleanup(func() {
		m.stopped.Store(true)
		w.Stop()
	})
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || cm.Name != configMap || ev.Type == watch.Deleted {
				continue
			}
			data, ok := cm.Data[plan.KeyFor(quota)]
			if !ok {
				continue
			}
			doc, err := plan.Parse([]byte(data))
			if err != nil {
				m.problem("ConfigMap %s resourceVersion %s: %v", cm.Name, cm.ResourceVersion, err)
				continue
			}
			m.published(resourceVersion(cm), doc)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.ended = !m.stopped.Load()
	}()
	return m
}

func resourceVersion(obj client.Object) int64 {
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	Expect(err).NotTo(HaveOccurred(), "resourceVersion of %s", obj.GetName())
	return rv
}

func (m *inFlightModel) problem(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

func (m *inFlightModel) pod(name string) *podModel {
	p, ok := m.pods[name]
	if !ok {
		p = &podModel{}
		m.pods[name] = p
	}
	return p
}

// published records a version of the document and checks the sum.
func (m *inFlightModel) published(rv int64, doc plan.Document) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.docs = append(m.docs, publishedVersion{rv: rv, doc: doc})
	for name := range doc.Pods {
		m.pod(name)
	}
	sum, held := 0, map[string]int{}
	for name, p := range m.pods {
		if p.released {
			continue
		}
		most := p.acked
		for _, v := range m.docs {
			if v.rv > p.ackedAt {
				most = max(most, v.doc.For(name).Permits)
			}
		}
		held[name] = most
		sum += most
	}
	m.peak = max(m.peak, sum)
	if sum > m.usable {
		m.problems = append(m.problems, fmt.Sprintf("after revision %d (resourceVersion %d) the pods may have %d in flight > %d usable: %v",
			doc.Revision, rv, sum, m.usable, held))
	}
}

// acknowledge plays the runtime library of each pod: it applies the
// document as published now and acknowledges its revision (the pods of the
// tests have no calls in flight, so a smaller share is within reach at
// once). What each pod acknowledged is recorded before the operator can
// see it.
func (m *inFlightModel) acknowledge(ctx context.Context, pods ...*corev1.Pod) {
	doc, cm := publishedDocument(ctx, Default, m.ns, m.configMap, m.quota)
	rv := resourceVersion(cm)
	m.mu.Lock()
	for _, pod := range pods {
		p := m.pod(pod.Name)
		if rv > p.ackedAt {
			p.ackedAt, p.acked = rv, doc.For(pod.Name).Permits
		}
	}
	m.mu.Unlock()
	annotateApplied(ctx, m.quota, plan.AckFor(doc).String(), pods...)
}

// release plays the runtime of a terminating pod that drained: from now on
// it has nothing in flight.
func (m *inFlightModel) release(ctx context.Context, uid types.UID, pod *corev1.Pod) {
	m.gone(pod)
	release(ctx, m.quota, uid, pod)
}

// gone records that the pod has nothing in flight any more: it released
// its share or the kubelet let it go.
func (m *inFlightModel) gone(pod *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pod(pod.Name).released = true
}

// verify checks that no published document let the pods exceed the usable
// permits, and that the watch saw documents and did not end early. It
// returns the most the pods could have had in flight at once.
func (m *inFlightModel) verify() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	Expect(m.problems).To(BeEmpty())
	Expect(m.ended).To(BeFalse(), "the watch ended before the spec did; documents may have been missed")
	Expect(m.docs).NotTo(BeEmpty())
	GinkgoWriter.Printf("in-flight model: %d documents checked, peak %d of %d usable\n", len(m.docs), m.peak, m.usable)
	return m.peak
}
