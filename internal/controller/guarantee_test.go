package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// The tests of this file play sequences in which the pods together could
// enforce more than the usable permits, each against the operator's
// reconciles over a fake API server, and check at every step what the pods
// may have in flight by podWorld, which knows nothing of the operator's
// record: only the documents the pods read and what they did with them.

// guardPod returns a Ready pod of namespace whose labels are app=<workload>.
func guardPod(namespace, workload, name string) *corev1.Pod {
	p := fakePod(name, map[string]string{"app": workload})
	p.Namespace, p.UID = namespace, types.UID("uid-"+namespace+"-"+name)
	return p
}

// guardDeployment returns a Deployment of namespace selecting app=<name>.
func guardDeployment(namespace, name string, replicas int32) *appsv1.Deployment {
	d := fakeDeployment(name, replicas)
	d.Namespace = namespace
	return d
}

// guardNamespace returns a namespace with labels.
func guardNamespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// guardContract returns the contract "logistics": 60 in flight at 80%, 48
// usable, shared by the namespaces labelled team=checkout.
func guardContract() *v1alpha1.DownstreamContract {
	return &v1alpha1.DownstreamContract{
		ObjectMeta: metav1.ObjectMeta{Name: "logistics", UID: "uid-contract-logistics", Generation: 1},
		Spec: v1alpha1.DownstreamContractSpec{
			Downstream:        "logistics.example.com",
			Contract:          v1alpha1.Contract{Concurrency: 60},
			SafetyPercent:     80,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "checkout"}},
		},
	}
}

// sharedQuota returns a quota of namespace, named name, sharing the
// contract "logistics" for the Deployment workload, with demand in flight
// when it is positive.
func sharedQuota(namespace, name, workload string, demand int32) *v1alpha1.DownstreamQuota {
	q := fakeQuota(name, "Deployment", workload)
	q.Namespace, q.UID = namespace, types.UID("uid-"+namespace+"-"+name)
	q.Spec.Contract, q.Spec.Demand = nil, nil
	q.Spec.ContractRef = &v1alpha1.ContractReference{Name: "logistics"}
	q.Spec.Downstream = "logistics.example.com"
	if demand > 0 {
		q.Spec.Demand = &v1alpha1.Demand{InFlight: ptr.To(demand)}
	}
	return q
}

// reconcileContract runs the contract reconciler once for the logistics
// contract, the one every fake-client world here shares.
func (e *fakeEnv) reconcileContract(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := NewDownstreamContractReconciler(e.pub).Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "logistics"}})
	if err != nil {
		t.Fatalf("Reconcile(contract logistics): %v", err)
	}
	return res
}

// reconcileInline runs the quota reconciler once for shop/payments,
// failing the test on an error.
func (e *fakeEnv) reconcileInline(t *testing.T) reconcile.Result {
	const name = inlineGate
	const namespace = "shop"
	t.Helper()
	res, err := e.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: namespace, Name: name}})
	if err != nil {
		t.Fatalf("Reconcile(%s/%s): %v", namespace, name, err)
	}
	return res
}

// update reads obj, lets change edit it and writes it back.
func update[T client.Object](t *testing.T, e *fakeEnv, obj T, change func(T)) {
	t.Helper()
	ctx := context.Background()
	if err := e.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	change(obj)
	if err := e.client.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// setPodReady sets the Ready condition of the pod name of namespace shop.
func setPodReady(t *testing.T, e *fakeEnv, name string, ready bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := e.client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
}

// deleteObject deletes obj at once, as a force deletion does.
func deleteObject(t *testing.T, e *fakeEnv, obj client.Object) {
	t.Helper()
	if err := e.client.Delete(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// quotaStatus reads a quota's status.
func quotaStatus(t *testing.T, e *fakeEnv, name string) v1alpha1.DownstreamQuotaStatus {
	t.Helper()
	return fakeQuotaOf(t, e, name).Status
}

// fakeQuotaOf reads the quota shop/name.
func fakeQuotaOf(t *testing.T, e *fakeEnv, name string) *v1alpha1.DownstreamQuota {
	const namespace = "shop"
	t.Helper()
	q := &v1alpha1.DownstreamQuota{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, q); err != nil {
		t.Fatal(err)
	}
	return q
}

// sharedWorld is the contract "logistics" shared by two callers, each one
// Ready pod: shop/search-gateway (quota logistics-api, no demand stated)
// and reports/reports (quota logistics-api, demand 10 in flight). Of the 48
// usable permits, reports gets 10 and shop 38. Both pods acknowledge.
type sharedWorld struct {
	env *fakeEnv
	w   *podWorld
}

const (
	sharedUsable = 48
	sharedGate   = "logistics-api"
)

func newSharedWorld(t *testing.T) *sharedWorld {
	t.Helper()
	labels := map[string]string{"team": "checkout"}
	env := newFakeEnv(
		guardNamespace("shop", labels), guardNamespace("reports", labels),
		guardContract(),
		guardDeployment("shop", "search-gateway", 1), guardPod("shop", "search-gateway", "search-gateway-0"),
		guardDeployment("reports", "reports", 1), guardPod("reports", "reports", "reports-0"),
		sharedQuota("shop", sharedGate, "search-gateway", 0), sharedQuota("reports", sharedGate, "reports", 10),
	)
	w := newPodWorld(t, env.client)
	w.start("shop", "search-gateway-0", sharedGate, "search-gateway-backpressure", true)
	w.start("reports", "reports-0", sharedGate, "reports-backpressure", true)
	s := &sharedWorld{env: env, w: w}
	s.rounds(t, 4, "setup")
	if got := [2]int{w.permits("shop", "search-gateway-0", sharedGate), w.permits("reports", "reports-0", sharedGate)}; got != [2]int{38, 10} {
		t.Fatalf("setup: shop and reports enforce %v, want [38 10]", got)
	}
	return s
}

// rounds runs n rounds of the world: the contract's reconcile, the quotas'
// own, the pods reading and then settling, checking what the pods may have
// in flight after each move.
func (s *sharedWorld) rounds(t *testing.T, n int, phase string) {
	t.Helper()
	for i := range n {
		s.env.reconcileContract(t)
		for _, ns := range []string{"shop", "reports"} {
			if _, err := s.env.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: sharedGate}}); err != nil {
				t.Fatalf("%s round %d: Reconcile(%s/%s): %v", phase, i, ns, sharedGate, err)
			}
		}
		for _, ns := range []string{"shop", "reports"} {
			s.w.read(ns, sharedGate)
		}
		s.w.check(sharedUsable, fmt.Sprintf("%s round %d, pods read", phase, i))
		for _, ns := range []string{"shop", "reports"} {
			s.w.settle(ns, sharedGate)
		}
		s.w.check(sharedUsable, fmt.Sprintf("%s round %d, pods settled", phase, i))
	}
}

// TestTurnedAwayCallerStaysCounted removes the label that admits reports'
// namespace into the contract. Its pod keeps enforcing its 10 permits until
// it is told 0 and lets go of them; shop gets them only then.
func TestTurnedAwayCallerStaysCounted(t *testing.T) {
	s := newSharedWorld(t)
	update(t, s.env, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "reports"}}, func(ns *corev1.Namespace) { ns.Labels = nil })
	s.rounds(t, 4, "turned away")
	if got := [2]int{s.w.permits("shop", "search-gateway-0", sharedGate), s.w.permits("reports", "reports-0", sharedGate)}; got != [2]int{48, 0} {
		t.Errorf("once reports let go: shop and reports enforce %v, want [48 0]", got)
	}
}

// TestCallerWhoseWorkloadIsGoneStaysCounted deletes reports' Deployment
// without its pods (kubectl delete --cascade=orphan): its pod still runs
// and enforces its share until told 0.
func TestCallerWhoseWorkloadIsGoneStaysCounted(t *testing.T) {
	s := newSharedWorld(t)
	deleteObject(t, s.env, guardDeployment("reports", "reports", 1))
	s.rounds(t, 4, "workload gone")
	if got := s.w.permits("shop", "search-gateway-0", sharedGate); got != 48 {
		t.Errorf("once reports' orphaned pod let go: shop enforces %d, want 48", got)
	}
}

// TestDeletedCallerStaysCountedWhileItsPodsRun deletes reports' quota: its
// gate is withdrawn from its ConfigMap and its pod keeps its last plan, so
// its 10 permits stay counted until the pod is gone, and for the
// unacknowledged delay after.
func TestDeletedCallerStaysCountedWhileItsPodsRun(t *testing.T) {
	s := newSharedWorld(t)
	deleteObject(t, s.env, sharedQuota("reports", sharedGate, "reports", 10))
	s.rounds(t, 4, "quota deleted")
	if got := s.w.permits("shop", "search-gateway-0", sharedGate); got != 38 {
		t.Fatalf("while reports' pod runs on its last plan: shop enforces %d, want 38", got)
	}
	// The pod goes; its process is ended by the time the delay passes.
	deleteObject(t, s.env, guardPod("reports", "reports", "reports-0"))
	s.rounds(t, 2, "pod deleted")
	s.w.end("reports", sharedGate)
	advanceFake(s.env, DefaultUnacknowledgedDelay+time.Second)
	s.rounds(t, 3, "delay passed")
	if got := s.w.permits("shop", "search-gateway-0", sharedGate); got != 48 {
		t.Errorf("once reports' pod is gone: shop enforces %d, want 48", got)
	}
}

// TestTwoQuotasOfOneWorkloadShareAContract runs two gates of one workload
// on one contract: each gate's document gives each pod that gate's share,
// and the two together stay within the contract.
func TestTwoQuotasOfOneWorkloadShareAContract(t *testing.T) {
	labels := map[string]string{"team": "checkout"}
	env := newFakeEnv(
		guardNamespace("shop", labels), guardContract(),
		guardDeployment("shop", "api", 2), guardPod("shop", "api", "api-0"), guardPod("shop", "api", "api-1"),
		sharedQuota("shop", "ledger-read", "api", 8), sharedQuota("shop", "ledger-write", "api", 0),
	)
	w := newPodWorld(t, env.client)
	for _, pod := range []string{"api-0", "api-1"} {
		for _, gate := range []string{"ledger-read", "ledger-write"} {
			w.start("shop", pod, gate, "api-backpressure", true)
		}
	}
	for i := range 4 {
		env.reconcileContract(t)
		for _, gate := range []string{"ledger-read", "ledger-write"} {
			w.read("shop", gate)
		}
		w.check(sharedUsable, fmt.Sprintf("round %d", i))
		for _, gate := range []string{"ledger-read", "ledger-write"} {
			w.settle("shop", gate)
		}
	}
	got := [4]int{w.permits("shop", "api-0", "ledger-read"), w.permits("shop", "api-1", "ledger-read"),
		w.permits("shop", "api-0", "ledger-write"), w.permits("shop", "api-1", "ledger-write")}
	if got != [4]int{4, 4, 20, 20} {
		t.Errorf("api-0 and api-1 enforce %v on ledger-read then ledger-write, want [4 4 20 20]", got)
	}
}

// inlineWorld is the quota shop/payments of its own contract (50 at 80%:
// 40 usable) over the Deployment api, with pods api-a and api-b; acks says
// whether they acknowledge. After setup they enforce 20 each.
type inlineWorld struct {
	env  *fakeEnv
	w    *podWorld
	acks bool
}

const (
	inlineUsable = 40
	inlineGate   = "payments"
	inlineCM     = "api-backpressure"
)

func newInlineWorld(t *testing.T, acks bool) *inlineWorld {
	t.Helper()
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Demand = nil
	objs := []client.Object{guardDeployment("shop", "api", 2), guardPod("shop", "api", "api-a"), guardPod("shop", "api", "api-b"), q}
	env := newFakeEnv(objs...)
	s := &inlineWorld{env: env, w: newPodWorld(t, env.client), acks: acks}
	s.startPod("api-a")
	s.startPod("api-b")
	s.rounds(t, 2, "setup")
	if a, b := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate); a != 20 || b != 20 {
		t.Fatalf("setup: api-a and api-b enforce %d and %d, want 20 each", a, b)
	}
	return s
}

func (s *inlineWorld) startPod(name string) {
	s.w.start("shop", name, inlineGate, inlineCM, s.acks)
}

// addPod creates a Ready pod of api, api-c, and starts its process.
func (s *inlineWorld) addPod(t *testing.T) {
	const name = "api-c"
	t.Helper()
	if err := s.env.client.Create(context.Background(), guardPod("shop", "api", name)); err != nil {
		t.Fatal(err)
	}
	s.startPod(name)
}

// step reconciles the quota once, failing the test on an error.
func (s *inlineWorld) step(t *testing.T) {
	t.Helper()
	s.env.reconcileInline(t)
}

// rounds runs n rounds: a reconcile, every pod reading and settling.
func (s *inlineWorld) rounds(t *testing.T, n int, phase string) {
	t.Helper()
	for i := range n {
		s.step(t)
		s.w.read("shop", inlineGate)
		s.w.check(inlineUsable, fmt.Sprintf("%s round %d, pods read", phase, i))
		s.w.settle("shop", inlineGate)
		s.w.check(inlineUsable, fmt.Sprintf("%s round %d, pods settled", phase, i))
	}
}

// TestInlineQuotaMovedToAnotherWorkload points a quota at a new workload
// (a blue/green switch): the old workload's pods enforce their share until
// they are told 0 and let go of it; the new ones get it only then.
func TestInlineQuotaMovedToAnotherWorkload(t *testing.T) {
	s := newInlineWorld(t, true)
	for _, obj := range []client.Object{guardDeployment("shop", "green", 2), guardPod("shop", "green", "green-a"), guardPod("shop", "green", "green-b")} {
		if err := s.env.client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	s.w.start("shop", "green-a", inlineGate, "green-backpressure", true)
	s.w.start("shop", "green-b", inlineGate, "green-backpressure", true)
	update(t, s.env, &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: inlineGate}}, func(q *v1alpha1.DownstreamQuota) {
		q.Spec.WorkloadRef.Name = "green"
	})
	s.rounds(t, 5, "moved")
	got := [4]int{s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate),
		s.w.permits("shop", "green-a", inlineGate), s.w.permits("shop", "green-b", inlineGate)}
	if got != [4]int{0, 0, 20, 20} {
		t.Errorf("api-a, api-b, green-a, green-b enforce %v, want [0 0 20 20]", got)
	}
}

// lagBehind brings a third pod in while api-a and api-b read nothing more:
// they enforce what they enforced, 20 each, whatever the operator
// publishes, and so the third pod must get nothing.
func (s *inlineWorld) lagBehind(t *testing.T, phase string) {
	t.Helper()
	s.step(t)
	s.w.read("shop", inlineGate, "api-c")
	s.w.check(inlineUsable, phase)
}

// TestLostRecordStartsAboveTheRevisionsSeen deletes status.division after
// several revisions; the pods still carry their acknowledgements of those
// revisions. The record starts again from what the published document says
// the pods hold, at a revision no pod has acknowledged.
func TestLostRecordStartsAboveTheRevisionsSeen(t *testing.T) {
	s := newInlineWorld(t, true)
	// Some revisions: a third pod comes and goes.
	s.addPod(t)
	s.rounds(t, 3, "third pod")
	setPodReady(t, s.env, "api-c", false)
	s.rounds(t, 3, "third pod not Ready")
	before := quotaStatus(t, s.env, inlineGate).Division
	if before == nil || before.Revision < 4 {
		t.Fatalf("setup: division %+v, want several revisions", before)
	}

	q := &v1alpha1.DownstreamQuota{}
	if err := s.env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineGate}, q); err != nil {
		t.Fatal(err)
	}
	q.Status.Division = nil
	if err := s.env.client.Status().Update(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	setPodReady(t, s.env, "api-c", true)
	s.lagBehind(t, "record lost, third pod Ready again")
	after := quotaStatus(t, s.env, inlineGate).Division
	if after == nil || after.Revision <= before.Revision {
		t.Errorf("the record starts again at revision %v, want above %d, the revision the pods acknowledged", after, before.Revision)
	}
}

// TestAcknowledgementFromTheFutureIsIgnored has api-a and api-b acknowledge
// a revision that was never published: it acknowledges nothing.
func TestAcknowledgementFromTheFutureIsIgnored(t *testing.T) {
	s := newInlineWorld(t, true)
	s.addPod(t)
	s.step(t) // api-a and api-b told their smaller shares
	epoch := string(types.UID("uid-" + inlineGate))
	for _, pod := range []string{"api-a", "api-b"} {
		s.w.annotate(procKey{"shop", pod, inlineGate}, epoch+"/9223372036854775807")
	}
	s.lagBehind(t, "acknowledged from the future")
}

// TestRemovedAcknowledgementKeepsTheShareCounted removes api-a's
// acknowledgement and garbles api-b's while their smaller shares wait to be
// acknowledged: they still acknowledge plans, so only their
// acknowledgement frees their old shares, however long it takes.
func TestRemovedAcknowledgementKeepsTheShareCounted(t *testing.T) {
	s := newInlineWorld(t, true)
	s.addPod(t)
	s.step(t)
	s.w.annotate(procKey{"shop", "api-a", inlineGate}, "")
	s.w.annotate(procKey{"shop", "api-b", inlineGate}, "not an acknowledgement")
	advanceFake(s.env, 2*DefaultUnacknowledgedDelay)
	s.lagBehind(t, "acknowledgements removed and garbled, the delay long passed")
}

// TestDeclaredAcknowledgementIsWaitedFor has pods that declare, by the
// backpressure.dev/acknowledges annotation, that they acknowledge, but are
// slow to send their first acknowledgement: their smaller shares are not
// taken as applied when the unacknowledged delay passes.
func TestDeclaredAcknowledgementIsWaitedFor(t *testing.T) {
	declared := func(name string) *corev1.Pod {
		p := guardPod("shop", "api", name)
		p.Annotations = map[string]string{v1alpha1.AcknowledgesAnnotation: "true"}
		return p
	}
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Demand = nil
	env := newFakeEnv(guardDeployment("shop", "api", 2), declared("api-a"), declared("api-b"), q)
	s := &inlineWorld{env: env, w: newPodWorld(t, env.client)}
	s.startPod("api-a")
	s.startPod("api-b")
	s.step(t)
	s.w.read("shop", inlineGate) // they apply their 20, slowly: no acknowledgement yet
	if err := env.client.Create(context.Background(), declared("api-c")); err != nil {
		t.Fatal(err)
	}
	s.startPod("api-c")
	s.step(t)
	advanceFake(env, 2*DefaultUnacknowledgedDelay)
	s.lagBehind(t, "declared acknowledging, not yet acknowledged, the delay passed")
}

// TestUnacknowledgedDelayCountsFromPublication fails the publication of a
// step that tells api-a and api-b (which do not acknowledge) their smaller
// shares, for longer than the unacknowledged delay. The document that
// finally tells them must not also grant their capacity: they drain to
// their smaller share only within the delay after they read it.
func TestUnacknowledgedDelayCountsFromPublication(t *testing.T) {
	s := newInlineWorld(t, false)
	s.w.drain("shop", inlineGate)
	s.addPod(t)
	s.env.applyErr = errors.New("the API server is unreachable")
	if _, err := s.env.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: inlineGate}}); err == nil {
		t.Fatal("a reconcile whose publication failed returned no error")
	}
	advanceFake(s.env, 10*time.Minute)
	s.env.applyErr = nil
	s.step(t)
	s.w.read("shop", inlineGate)
	s.w.check(inlineUsable, "published at last")
	advanceFake(s.env, DefaultUnacknowledgedDelay+time.Second)
	s.w.drain("shop", inlineGate)
	s.rounds(t, 2, "drained")
	if c := s.w.permits("shop", "api-c", inlineGate); c != 13 {
		t.Errorf("once the delay passed after the publication, api-c enforces %d, want 13", c)
	}
}

// TestForceDeletedPodStaysCounted deletes api-a's pod object at once while
// its process still runs: its share is counted until the unacknowledged
// delay has passed since it was told 0.
func TestForceDeletedPodStaysCounted(t *testing.T) {
	s := newInlineWorld(t, true)
	deleteObject(t, s.env, guardPod("shop", "api", "api-a"))
	s.rounds(t, 3, "force-deleted")
	if b := s.w.permits("shop", "api-b", inlineGate); b != 20 {
		t.Fatalf("while api-a's process may run: api-b enforces %d, want 20", b)
	}
	advanceFake(s.env, DefaultUnacknowledgedDelay+time.Second)
	s.w.end("shop", inlineGate, "api-a")
	s.rounds(t, 2, "delay passed")
	if b := s.w.permits("shop", "api-b", inlineGate); b != 40 {
		t.Errorf("once the delay passed: api-b enforces %d, want 40", b)
	}
}

// TestRelabelledPodStaysCounted takes api-a out of the workload's selector:
// its process runs on and reads the same ConfigMap, so it is told 0 and its
// share counted until it lets go.
func TestRelabelledPodStaysCounted(t *testing.T) {
	s := newInlineWorld(t, true)
	update(t, s.env, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api-a"}}, func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "debugging"}
	})
	s.rounds(t, 4, "relabelled")
	if a, b := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate); a != 0 || b != 40 {
		t.Errorf("api-a and api-b enforce %d and %d, want 0 and 40", a, b)
	}
}

// TestRolledBackRecordPublishesAboveTheDocument restores status.division
// to a copy from several revisions back (a backup, a GitOps re-apply): the
// pods enforce a newer revision, which the operator must publish above.
func TestRolledBackRecordPublishesAboveTheDocument(t *testing.T) {
	s := newInlineWorld(t, true)
	old := s.quota(t)
	s.addPod(t)
	s.rounds(t, 3, "third pod")
	doc, _ := inlineDocument(t, s.env)
	s.restoreStatus(t, old)
	setPodReady(t, s.env, "api-c", false)
	s.rounds(t, 3, "record rolled back")
	after, _ := inlineDocument(t, s.env)
	if after.Revision <= doc.Revision {
		t.Errorf("after the record was rolled back the document is at revision %d, want above %d", after.Revision, doc.Revision)
	}
	if a, b := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate); a != 20 || b != 20 {
		t.Errorf("api-a and api-b enforce %d and %d, want 20 each", a, b)
	}
}

// TestDivisionBackFromAnotherEpochPublishesAboveWhatPodsRemember moves
// the quota's pods to another division's document (the quota joined a
// shared contract) and back, its record rolled back meanwhile to a copy
// from before the pods' newest revision: nothing the operator can see
// shows that revision any more, but the pods remember it and would refuse
// every document up to it. The division comes back above it.
func TestDivisionBackFromAnotherEpochPublishesAboveWhatPodsRemember(t *testing.T) {
	s := newInlineWorld(t, true)
	old := s.quota(t)
	s.addPod(t)
	s.rounds(t, 3, "third pod")
	remembered, cm := inlineDocument(t, s.env)

	// Another division's document, as a shared contract publishes it.
	away := remembered
	away.Epoch, away.Revision = "uid-of-a-contract", 3
	away.Hash = plan.Hash(away)
	data, err := plan.Marshal(away)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[plan.KeyFor(inlineGate)] = string(data)
	if err := s.env.client.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	s.w.read("shop", inlineGate)
	s.w.settle("shop", inlineGate)

	// Back, with the record of before the third pod.
	s.restoreStatus(t, old)
	setPodReady(t, s.env, "api-c", false)
	s.rounds(t, 3, "back from another epoch")
	back, _ := inlineDocument(t, s.env)
	if back.Epoch != remembered.Epoch || back.Revision <= remembered.Revision {
		t.Fatalf("back from another epoch the document is %s/%d, want above %s/%d, which the pods remember",
			back.Epoch, back.Revision, remembered.Epoch, remembered.Revision)
	}
	if a, b, c := s.w.permits("shop", "api-a", inlineGate), s.w.permits("shop", "api-b", inlineGate), s.w.permits("shop", "api-c", inlineGate); a != 20 || b != 20 || c != 0 {
		t.Errorf("api-a, api-b and api-c enforce %d, %d and %d, want 20, 20 and 0", a, b, c)
	}
}

// TestCallerLeavingAContractCountsWhatItsRecordSays moves shop's quota out
// of the shared contract onto a contract of its own just after an older
// document of the shared contract was written back into its ConfigMap (a
// backup, a GitOps copy) that gives its pods nothing: the pods refuse it
// and keep enforcing the contract's newer one, 38 permits on
// search-gateway-0. The quota's own division, stepping before the
// contract's has replaced that document, counts them at what the shared
// contract's record of them says they may hold (the quota's status.division
// while it shared the contract), not at what the document says:
// search-gateway-1 gets only what is left until search-gateway-0 has let
// go.
func TestCallerLeavingAContractCountsWhatItsRecordSays(t *testing.T) {
	s := newSharedWorld(t)
	ctx := context.Background()
	if err := s.env.client.Create(ctx, guardPod("shop", "search-gateway", "search-gateway-1")); err != nil {
		t.Fatal(err)
	}
	s.w.start("shop", "search-gateway-1", sharedGate, "search-gateway-backpressure", true)
	s.rounds(t, 3, "a second pod")
	setPodReady(t, s.env, "search-gateway-1", false)
	s.rounds(t, 3, "the second pod not Ready")

	cm := &corev1.ConfigMap{}
	if err := s.env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "search-gateway-backpressure"}, cm); err != nil {
		t.Fatal(err)
	}
	newest, err := plan.Parse([]byte(cm.Data[plan.KeyFor(sharedGate)]))
	if err != nil {
		t.Fatal(err)
	}
	old := newest.WithShare(plan.PodShare{})
	old.Revision, old.Pods, old.Holding = newest.Revision-1, nil, nil
	old.Hash = plan.Hash(old)
	data, err := plan.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[plan.KeyFor(sharedGate)] = string(data)
	if err := s.env.client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	s.w.read("shop", sharedGate)
	if got := s.w.permits("shop", "search-gateway-0", sharedGate); got != 38 {
		t.Fatalf("search-gateway-0 took the older document: it enforces %d, want 38", got)
	}

	update(t, s.env, &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: sharedGate}}, func(q *v1alpha1.DownstreamQuota) {
		q.Spec.ContractRef, q.Spec.Contract = nil, &v1alpha1.Contract{Concurrency: 60}
	})
	setPodReady(t, s.env, "search-gateway-1", true)
	// shop's pods now answer to its own contract of 48 usable permits.
	shop := func() int {
		n := 0
		for _, pod := range []string{"search-gateway-0", "search-gateway-1"} {
			if p := s.w.procs[procKey{"shop", pod, sharedGate}]; !p.ended {
				n += p.inFlight
			}
		}
		return n
	}
	// The quota's own division steps first, before the contract's
	// publishes the caller's leaving over the older document.
	for i := range 4 {
		for _, ns := range []string{"shop", "", "reports"} {
			if ns == "" {
				s.env.reconcileContract(t)
				continue
			}
			if _, err := s.env.r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: sharedGate}}); err != nil {
				t.Fatal(err)
			}
			s.w.read(ns, sharedGate)
		}
		if n := shop(); n > sharedUsable {
			t.Fatalf("out of the contract, round %d: shop's pods may have %d calls in flight > %d usable", i, n, sharedUsable)
		}
		for _, ns := range []string{"shop", "reports"} {
			s.w.settle(ns, sharedGate)
		}
	}
	if got := [2]int{s.w.permits("shop", "search-gateway-0", sharedGate), s.w.permits("shop", "search-gateway-1", sharedGate)}; got != [2]int{24, 24} {
		t.Errorf("once search-gateway-0 let go: shop's pods enforce %v, want [24 24]", got)
	}
}

// quota reads the quota shop/payments as it is now.
func (s *inlineWorld) quota(t *testing.T) *v1alpha1.DownstreamQuota {
	t.Helper()
	q := &v1alpha1.DownstreamQuota{}
	if err := s.env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineGate}, q); err != nil {
		t.Fatal(err)
	}
	return q
}

// restoreStatus writes old's status back over the quota's (a backup, a
// GitOps re-apply of an older copy).
func (s *inlineWorld) restoreStatus(t *testing.T, old *v1alpha1.DownstreamQuota) {
	t.Helper()
	q := s.quota(t)
	q.Status = old.Status
	if err := s.env.client.Status().Update(context.Background(), q); err != nil {
		t.Fatal(err)
	}
}

// inlineDocument reads the quota's published document.
func inlineDocument(t *testing.T, e *fakeEnv) (plan.Document, *corev1.ConfigMap) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := e.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineCM}, cm); err != nil {
		t.Fatal(err)
	}
	d, err := plan.Parse([]byte(cm.Data[plan.KeyFor(inlineGate)]))
	if err != nil {
		t.Fatal(err)
	}
	return d, cm
}

// TestAnotherReplicasClockRestartsTheDelay has one operator replica tell
// api-a and api-b (which do not acknowledge) their smaller shares, and
// another, whose clock is ten minutes ahead, take over: it counts the delay
// on its own clock, from when it took over.
func TestAnotherReplicasClockRestartsTheDelay(t *testing.T) {
	s := newInlineWorld(t, false)
	s.w.drain("shop", inlineGate)
	s.addPod(t)
	s.step(t)
	s.w.read("shop", inlineGate)
	ahead := clocktesting.NewFakePassiveClock(s.env.clock.Now().Add(10 * time.Minute))
	other := NewDownstreamQuotaReconciler(NewPublisher(s.env.client, s.env.client, s.env.recorder, WithClock(ahead), WithClockID("another replica")))
	if _, err := other.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: inlineGate}}); err != nil {
		t.Fatal(err)
	}
	s.w.read("shop", inlineGate)
	s.w.check(inlineUsable, "another replica took over")
}

// TestRecordWithoutShrinkTimeDoesNotSettle edits the record so that two
// pods hold more than they are told since the current revision without
// saying since when: their old shares stay counted.
func TestRecordWithoutShrinkTimeDoesNotSettle(t *testing.T) {
	s := newInlineWorld(t, false)
	q := &v1alpha1.DownstreamQuota{}
	if err := s.env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineGate}, q); err != nil {
		t.Fatal(err)
	}
	for i, p := range q.Status.Division.Pods {
		q.Status.Division.Pods[i] = v1alpha1.PodShareStatus{Name: p.Name, Permits: p.Permits - 7, Holds: ptr.To(p.Permits),
			ShrunkAtRevision: q.Status.Division.Revision}
	}
	if err := s.env.client.Status().Update(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	s.addPod(t)
	s.lagBehind(t, "holds without a shrink time")
}

// TestUnacknowledgedDelayShorterThanTheDeadline reports a delay that a
// call's deadline outlasts: a pod told a smaller share may still have calls
// above it when the delay has passed.
func TestUnacknowledgedDelayShorterThanTheDeadline(t *testing.T) {
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Handover.UnacknowledgedDelay = &metav1.Duration{Duration: time.Second}
	env := newFakeEnv(guardDeployment("shop", "api", 1), guardPod("shop", "api", "api-a"), q)
	env.reconcileInline(t)
	st := quotaStatus(t, env, inlineGate)
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonUnacknowledgedDelayTooShort ||
		!strings.Contains(c.Message, "1s") || !strings.Contains(c.Message, "2s") {
		t.Errorf("Ready = %+v, want False with reason %s naming the delay and the deadline", c, v1alpha1.ReasonUnacknowledgedDelayTooShort)
	}
}

// TestPlanTooLargeForAConfigMap divides over pods so many and so long-named
// that no document fits the ConfigMap: the operator says so and publishes
// nothing, rather than failing every apply and reporting Ready.
func TestPlanTooLargeForAConfigMap(t *testing.T) {
	const pods = 6000
	objs := []client.Object{guardDeployment("shop", "api", pods)}
	long := strings.Repeat("x", 200)
	for i := range pods {
		objs = append(objs, guardPod("shop", "api", fmt.Sprintf("api-%s-%05d", long, i)))
	}
	q := fakeQuota(inlineGate, "Deployment", "api")
	q.Spec.Contract.Concurrency = 100000
	objs = append(objs, q)
	env := newFakeEnv(objs...)
	env.reconcileInline(t)
	st := quotaStatus(t, env, inlineGate)
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonDivisionTooLarge {
		t.Errorf("Ready = %+v, want False with reason %s", c, v1alpha1.ReasonDivisionTooLarge)
	}
	if st.ConfigMap != nil {
		t.Errorf("status.configMap = %+v, want none: nothing was published", st.ConfigMap)
	}
	cm := &corev1.ConfigMap{}
	if err := env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineCM}, cm); err == nil {
		if _, ok := cm.Data[plan.KeyFor(inlineGate)]; ok {
			t.Errorf("a document too large for the ConfigMap was written")
		}
	}
}

// TestReleasedThenGonePodIsReleased deletes api-a as a kubelet does once
// its process has handed its share back: the release is seen on the pod
// being deleted, and the object is gone before the next step. Its share
// goes to api-b at once, not after the unacknowledged delay that a pod
// gone without a word waits out.
func TestReleasedThenGonePodIsReleased(t *testing.T) {
	s := newInlineWorld(t, true)
	releaseAndGo(t, s.env, s.w, "api", "api-a")
	s.rounds(t, 2, "released, then gone")
	if b := s.w.permits("shop", "api-b", inlineGate); b != 40 {
		t.Errorf("after api-a released its share and went: api-b enforces %d, want 40", b)
	}
}

// releaseAndGo deletes the pod name of workload in shop as a kubelet does
// once its process has handed its share of the inline gate back: the
// watch's last event of the pod says "<epoch>/released", then its process
// ends and its object goes.
func releaseAndGo(t *testing.T, env *fakeEnv, w *podWorld, workload, name string) {
	t.Helper()
	epoch := quotaStatus(t, env, inlineGate).Division.Epoch
	pod := guardPod("shop", workload, name)
	pod.DeletionTimestamp = ptr.To(metav1.Now())
	pod.Annotations = map[string]string{appliedAnnotation(inlineGate): plan.Ack{Epoch: epoch, Released: true}.String()}
	env.mapper().quotasForPod(context.Background(), pod)
	w.end("shop", inlineGate, name)
	deleteObject(t, env, guardPod("shop", workload, name))
}
