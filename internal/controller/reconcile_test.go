package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func reconcileQuota(t *testing.T, env *fakeEnv, name string) reconcile.Result {
	t.Helper()
	res, err := env.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: name}})
	if err != nil {
		t.Fatalf("Reconcile(%s): %v", name, err)
	}
	return res
}

func TestReconcilePublishesOnceAndThenWritesNothing(t *testing.T) {
	ctx := context.Background()
	env := newFakeEnv(
		fakeDeployment("search-gateway", 4),
		fakeHPA("search-gateway", "Deployment", "search-gateway", 6),
		fakePod("search-gateway-a", map[string]string{"app": "search-gateway"}),
		fakePod("search-gateway-b", map[string]string{"app": "search-gateway", "extra": "x"}),
		fakePod("other-a", map[string]string{"app": "other"}),
		fakeQuota("logistics-api", "Deployment", "search-gateway"),
	)
	if res := reconcileQuota(t, env, "logistics-api"); res != (reconcile.Result{}) {
		t.Errorf("Reconcile result %+v, want none", res)
	}
	// The ConfigMap is claimed, the division's record written ahead, the
	// gate applied, and only then the rest of the status (Ready, the
	// ConfigMap): a first publication writes the status twice, so that
	// Ready never comes before the plan.
	want := map[string]int{"create ConfigMap": 1, "patch DownstreamQuota/status": 2, "apply ConfigMap": 1}
	if diff := cmp.Diff(want, env.writes.Counts()); diff != "" {
		t.Errorf("writes of the first reconcile (-want +got):\n%s", diff)
	}

	q := &v1alpha1.DownstreamQuota{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "logistics-api"}, q); err != nil {
		t.Fatal(err)
	}
	wantReplicas := &v1alpha1.ReplicaStatus{
		Spec: 4, HPAMax: ptr.To[int32](20), HPACurrent: ptr.To[int32](6), HPADesired: ptr.To[int32](6),
		ExistingPods: 2, ReadyPods: 2, Divisor: 2, DivisorSource: v1alpha1.DivisorReadyPods,
	}
	if diff := cmp.Diff(wantReplicas, q.Status.Replicas); diff != "" {
		t.Errorf("status.replicas (-want +got):\n%s", diff)
	}
	if q.Status.PerPod == nil || q.Status.PerPod.Permits != 20 { // 50 × 80% / 2 Ready pods
		t.Errorf("status.perPod = %+v, want 20 permits", q.Status.PerPod)
	}
	wantDivision := &v1alpha1.DivisionStatus{
		Epoch: "uid-logistics-api", Revision: 1, Usable: 40, Base: 20, HandedOut: 40, Held: 40,
		Shares: []v1alpha1.ShareCount{{Permits: 20, Pods: 2}},
		Told:   []v1alpha1.ToldPods{{Permits: 20, Pods: []string{"search-gateway-a", "search-gateway-b"}}},
		Clock:  "test",
		Pods:   []v1alpha1.PodShareStatus{{Name: "search-gateway-a", Permits: 20}, {Name: "search-gateway-b", Permits: 20}},
	}
	if diff := cmp.Diff(wantDivision, q.Status.Division); diff != "" {
		t.Errorf("status.division (-want +got):\n%s", diff)
	}
	if q.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d, want 1", q.Status.ObservedGeneration)
	}
	if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonDemandExceedsQuota {
		t.Errorf("Ready = %+v, want True with DemandExceedsQuota (1900 rps × 0.22 s = 418 in flight against 40)", c)
	}
	if diff := cmp.Diff(&v1alpha1.RolloutStatus{Total: 2, Pending: []string{"search-gateway-a", "search-gateway-b"}}, q.Status.Rollout); diff != "" {
		t.Errorf("status.rollout (-want +got):\n%s", diff)
	}

	cm := &corev1.ConfigMap{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "search-gateway-backpressure"}, cm); err != nil {
		t.Fatal(err)
	}
	doc, err := plan.Parse([]byte(cm.Data["logistics-api.json"]))
	if err != nil {
		t.Fatalf("published document: %v", err)
	}
	if doc.Permits != 0 || doc.For("search-gateway-a").Permits != 20 || doc.For("search-gateway-b").Permits != 20 ||
		doc.Hash != q.Status.ConfigMap.Hash || doc.Generation != 1 || doc.Revision != 1 {
		t.Errorf("published %+v, want 20 permits for each pod, none for a pod not named, generation and revision 1 and the status hash %s", doc, q.Status.ConfigMap.Hash)
	}
	if diff := cmp.Diff(configMapLabels("search-gateway"), cm.Labels); diff != "" {
		t.Errorf("ConfigMap labels (-want +got):\n%s", diff)
	}
	if got := env.recorded(); len(got) != 1 || got[0] != "Normal PlanChanged permits 20 per pod: Ready pods 2; 40 usable permits = 20 × 2 + 0; published to ConfigMap search-gateway-backpressure" {
		t.Errorf("events %q, want one PlanChanged", got)
	}

	before := env.writes.Total()
	for range 3 {
		reconcileQuota(t, env, "logistics-api")
	}
	if n := env.writes.Total() - before; n != 0 {
		t.Errorf("reconciles with nothing new wrote %d times: %s", n, env.writes)
	}
	if got := env.recorded(); len(got) != 0 {
		t.Errorf("reconciles with nothing new recorded %q", got)
	}
}

// TestReconcileOneStatusWriteWhenAPodStopsBeingReady: the step that tells a
// pod that stopped being Ready 0 permits, and records what it may still
// hold and since when, writes the quota's status once and the gate once; a
// reconcile after it writes nothing. The clock has nanoseconds, which the
// API server does not keep in status.division.pods[].shrunkAt.
func TestReconcileOneStatusWriteWhenAPodStopsBeingReady(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"app": "search-gateway"}
	env := newFakeEnv(
		fakeDeployment("search-gateway", 2),
		fakePod("search-gateway-a", labels), fakePod("search-gateway-b", labels),
		fakeQuota("logistics-api", "Deployment", "search-gateway"),
	)
	env.clock.SetTime(time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC))
	reconcileQuota(t, env, "logistics-api")

	pod := &corev1.Pod{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "search-gateway-b"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	if err := env.client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	before := env.writes.Counts()
	if res := reconcileQuota(t, env, "logistics-api"); res.RequeueAfter != DefaultUnacknowledgedDelay {
		t.Errorf("Reconcile result %+v, want a recheck once b's old share stops counting, after %s", res, DefaultUnacknowledgedDelay)
	}
	after := env.writes.Counts()
	got := map[string]int{}
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			got[k] = d
		}
	}
	if diff := cmp.Diff(map[string]int{"patch DownstreamQuota/status": 1, "apply ConfigMap": 1}, got); diff != "" {
		t.Errorf("writes of the step (-want +got):\n%s", diff)
	}
	q := &v1alpha1.DownstreamQuota{}
	if err := env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "logistics-api"}, q); err != nil {
		t.Fatal(err)
	}
	if b := shareOf(q.Status.Division, "search-gateway-b"); b.Permits != 0 || b.Holds == nil || b.ShrunkAt == nil {
		t.Errorf("b's record %+v, want told 0 and holding its old share since the step", b)
	}
	total := env.writes.Total()
	reconcileQuota(t, env, "logistics-api")
	if n := env.writes.Total() - total; n != 0 {
		t.Errorf("a reconcile with nothing new wrote %d times: %s", n, env.writes)
	}
}

func TestReconcileWorkloadNotFound(t *testing.T) {
	env := newFakeEnv(fakeQuota("payments", "StatefulSet", "ledger"))
	if res := reconcileQuota(t, env, "payments"); res != (reconcile.Result{}) {
		t.Errorf("Reconcile result %+v, want no requeue: the workload's watch brings the next reconcile", res)
	}
	q := &v1alpha1.DownstreamQuota{}
	if err := env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "payments"}, q); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Reason != v1alpha1.ReasonWorkloadNotFound || c.Message != "StatefulSet ledger not found; a plan is published once it exists" {
		t.Errorf("Ready = %+v, want WorkloadNotFound", c)
	}
	if counts := env.writes.Counts(); !cmp.Equal(counts, map[string]int{"patch DownstreamQuota/status": 1}) {
		t.Errorf("writes %v, want only the status", counts)
	}
}

func TestReconcileConflictRechecks(t *testing.T) {
	foreign := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ledger-backpressure"},
		Data:       map[string]string{"settings": "mine"},
	}
	env := newFakeEnv(fakeStatefulSet("ledger", 3), fakeQuota("payments", "StatefulSet", "ledger"), foreign)
	if res := reconcileQuota(t, env, "payments"); res.RequeueAfter != DefaultConflictRecheck {
		t.Errorf("Reconcile result %+v, want a recheck after %s", res, DefaultConflictRecheck)
	}
	// Nothing is published, so the division's record goes with the
	// conditions in one write; the foreign ConfigMap is not touched.
	if counts := env.writes.Counts(); !cmp.Equal(counts, map[string]int{"patch DownstreamQuota/status": 1}) {
		t.Errorf("writes %v, want only the status", counts)
	}
	got := env.recorded()
	if len(got) != 1 || got[0] != "Warning ConfigMapConflict ConfigMap ledger-backpressure exists and is not managed by backpressure-operator (it lacks the label app.kubernetes.io/managed-by=backpressure-operator); it was left untouched and the plan is not published" {
		t.Errorf("events %q, want one ConfigMapConflict warning", got)
	}
	reconcileQuota(t, env, "payments")
	if got := env.recorded(); len(got) != 0 {
		t.Errorf("a second reconcile in the same conflict recorded %q", got)
	}
}

func TestReconcileWithdrawsTheGatesOfADeletedQuota(t *testing.T) {
	ctx := context.Background()
	owner := func(name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: name, UID: types.UID("uid-" + name)}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "api-backpressure", Labels: configMapLabels("api"),
			OwnerReferences: []metav1.OwnerReference{owner("payments"), owner("search")},
		},
		Data: map[string]string{"payments.json": "{}", "search.json": "{}"},
	}
	env := newFakeEnv(cm)
	key := client.ObjectKeyFromObject(cm)

	reconcileQuota(t, env, "payments")
	got := &corev1.ConfigMap{}
	if err := env.client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"search.json": "{}"}, got.Data); diff != "" {
		t.Errorf("data after the first quota went (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{owner("search")}, got.OwnerReferences); diff != "" {
		t.Errorf("owners after the first quota went (-want +got):\n%s", diff)
	}

	reconcileQuota(t, env, "search")
	if err := env.client.Get(ctx, key, got); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap outlived its last gate: %v", err)
	}
	if counts := env.writes.Counts(); !cmp.Equal(counts, map[string]int{"patch ConfigMap": 2, "delete ConfigMap": 1}) {
		t.Errorf("writes %v", counts)
	}
}

// TestReconcileFromAStaleCacheKeepsTheRecord plays a cache that still holds
// an old quota (its status.division two revisions back) while the pods it
// lists are current. The step computed from the old record must not reach
// the API server: the record is what every pod may hold, and pod b was told
// 20 permits in the published revision 3.
func TestReconcileFromAStaleCacheKeepsTheRecord(t *testing.T) {
	ctx := context.Background()
	notReady := func(p *corev1.Pod) *corev1.Pod { p.Status.Conditions = nil; return p }
	env := newFakeEnv(
		fakeDeployment("api", 3),
		fakePod("api-a", map[string]string{"app": "api"}),
		notReady(fakePod("api-b", map[string]string{"app": "api"})),
		notReady(fakePod("api-c", map[string]string{"app": "api"})),
		fakeQuota("payments", "Deployment", "api"),
	)
	quotaKey := client.ObjectKey{Namespace: "shop", Name: "payments"}
	getQuota := func() *v1alpha1.DownstreamQuota {
		t.Helper()
		q := &v1alpha1.DownstreamQuota{}
		if err := env.client.Get(ctx, quotaKey, q); err != nil {
			t.Fatal(err)
		}
		return q
	}
	pod := func(name string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		if err := env.client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	setReady := func(name string) {
		t.Helper()
		p := pod(name)
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := env.client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	share := func(div *v1alpha1.DivisionStatus, pod string) v1alpha1.PodShareStatus {
		for _, p := range div.Pods {
			if p.Name == pod {
				return p
			}
		}
		return v1alpha1.PodShareStatus{Name: pod}
	}

	reconcileQuota(t, env, "payments") // revision 1: a 40
	stale := getQuota()
	setReady("api-b")
	reconcileQuota(t, env, "payments") // revision 2: a told 20, holds 40; b 0
	a := pod("api-a")
	a.Annotations = map[string]string{appliedAnnotation("payments"): string(stale.UID) + "/2"}
	if err := env.client.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	reconcileQuota(t, env, "payments") // revision 3: a 20, b 20
	div := getQuota().Status.Division
	if div.Revision != 3 || share(div, "api-b").Permits != 20 {
		t.Fatalf("setup: division %+v, want revision 3 with api-b at 20", div)
	}

	// A third pod turns Ready; the reconcile that notices reads the quota
	// as it was at revision 1.
	setReady("api-c")
	r := staleCacheReconciler(env, stale)
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: quotaKey}); err != nil {
		t.Fatalf("Reconcile from the stale cache: %v", err)
	}
	div = getQuota().Status.Division
	if b := share(div, "api-b"); div.Revision < 3 || max(b.Permits, ptr.Deref(b.Holds, 0)) < 20 {
		t.Errorf("after a reconcile from a stale cache the record is at revision %d and api-b may hold %d (%+v); "+
			"want revision ≥ 3 and api-b's 20 permits of revision 3 still counted", div.Revision, max(b.Permits, ptr.Deref(b.Holds, 0)), div.Pods)
	}
}

// TestReconcileContractMissingAfterAContractStep plays the race of a contract
// deleted while one of its steps runs: the step writes the caller's record
// after the quota's reconcile read the quota from the cache. The reconcile
// must neither write the old record back nor give up: it steps again soon,
// and then says the contract is gone over the new record.
func TestReconcileContractMissingAfterAContractStep(t *testing.T) {
	ctx := context.Background()
	q := fakeQuota("payments", "Deployment", "api")
	q.Spec.ContractRef = &v1alpha1.ContractReference{Name: "gone"}
	env := newFakeEnv(q)
	key := client.ObjectKeyFromObject(q)
	writeRecord := func(revision int64) *v1alpha1.DownstreamQuota {
		t.Helper()
		live := fakeQuotaOf(t, env, "payments")
		live.Status.Division = &v1alpha1.DivisionStatus{Epoch: "uid-contract", Revision: revision, Usable: 20, Base: 20}
		meta.SetStatusCondition(&live.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonPlanPublished, Message: "a step of the contract"})
		if err := env.client.Status().Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		return live
	}
	stale := writeRecord(2).DeepCopy()
	writeRecord(3) // the contract's step, after the cache's copy was read

	res, err := staleCacheReconciler(env, stale).Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil {
		t.Fatalf("Reconcile from the stale cache: %v", err)
	}
	if res.RequeueAfter != staleRecheck {
		t.Errorf("Reconcile from the stale cache = %+v, want a step again after %s: no event would bring one", res, staleRecheck)
	}
	if got := quotaStatus(t, env, "payments"); got.Division.Revision != 3 {
		t.Errorf("the stale reconcile wrote revision %d over the contract step's 3", got.Division.Revision)
	}

	reconcileQuota(t, env, "payments")
	got := quotaStatus(t, env, "payments")
	c := meta.FindStatusCondition(got.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Reason != v1alpha1.ReasonContractNotFound {
		t.Errorf("Ready = %+v, want ContractNotFound", c)
	}
	if got.Division.Revision != 3 {
		t.Errorf("revision %d after ContractNotFound, want the contract step's 3 kept", got.Division.Revision)
	}
}

// staleCacheReconciler is a quota reconciler whose cache returns stale for
// its quota, as an informer that has not seen the latest writes does; it
// reads and writes everything else through env.
func staleCacheReconciler(env *fakeEnv, stale *v1alpha1.DownstreamQuota) *DownstreamQuotaReconciler {
	key := client.ObjectKeyFromObject(stale)
	cache := interceptor.NewClient(env.client, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if q, ok := obj.(*v1alpha1.DownstreamQuota); ok && k == key {
				stale.DeepCopyInto(q)
				return nil
			}
			return c.Get(ctx, k, obj, opts...)
		},
	})
	return NewDownstreamQuotaReconciler(NewPublisher(cache, env.client, env.recorder, WithClock(env.clock), WithClockID("test")))
}
