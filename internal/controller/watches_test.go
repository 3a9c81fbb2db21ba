package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// names returns the sorted, distinct names of reqs.
func names(reqs []reconcile.Request) []string {
	out := make([]string, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// watchEnv has two Deployments and a StatefulSet, each with its quotas, one
// quota naming an HPA and one publishing to a ConfigMap of its own name.
func watchEnv() *fakeEnv {
	named := fakeQuota("named-hpa", "Deployment", "api")
	named.Spec.HPAName = "api-custom"
	custom := fakeQuota("custom-cm", "Deployment", "web")
	custom.Spec.ConfigMapName = "shared-gates"
	return newFakeEnv(
		fakeDeployment("api", 2), fakeDeployment("web", 2), fakeStatefulSet("ledger", 3),
		fakeQuota("payments", "Deployment", "api"), fakeQuota("search", "Deployment", "api"), named,
		fakeQuota("checkout", "Deployment", "web"), custom,
		fakeQuota("ledger-db", "StatefulSet", "ledger"),
		fakeQuota("same-name-other-kind", "StatefulSet", "api"),
	)
}

func TestQuotasForWorkload(t *testing.T) {
	env := watchEnv()
	ctx := context.Background()
	got := names(env.mapper().quotasForWorkload(kindDeployment)(ctx, fakeDeployment("api", 2)))
	if diff := cmp.Diff([]string{"shop/named-hpa", "shop/payments", "shop/search"}, got); diff != "" {
		t.Errorf("quotas of Deployment api (-want +got):\n%s", diff)
	}
	got = names(env.mapper().quotasForWorkload(kindStatefulSet)(ctx, fakeStatefulSet("api", 2)))
	if diff := cmp.Diff([]string{"shop/same-name-other-kind"}, got); diff != "" {
		t.Errorf("quotas of StatefulSet api (-want +got):\n%s", diff)
	}
	other := fakeDeployment("api", 2)
	other.Namespace = "elsewhere"
	if got := env.mapper().quotasForWorkload(kindDeployment)(ctx, other); len(got) != 0 {
		t.Errorf("a Deployment of another namespace maps to %v", names(got))
	}
}

func TestQuotasForHPA(t *testing.T) {
	env := watchEnv()
	ctx := context.Background()
	tests := []struct {
		name string
		hpa  client.Object
		want []string
	}{
		{name: "targets a Deployment", hpa: fakeHPA("web-hpa", "Deployment", "web", 3), want: []string{"shop/checkout", "shop/custom-cm"}},
		{name: "named by a quota", hpa: fakeHPA("api-custom", "Deployment", "nothing", 3), want: []string{"shop/named-hpa"}},
		{name: "targets a StatefulSet", hpa: fakeHPA("ledger", "StatefulSet", "ledger", 3), want: []string{"shop/ledger-db"}},
		{name: "targets what no quota names", hpa: fakeHPA("x", "Deployment", "unknown", 3), want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, names(env.mapper().quotasForHPA(ctx, tt.hpa))); diff != "" {
				t.Errorf("quotasForHPA (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuotasForPod(t *testing.T) {
	env := watchEnv()
	ctx := context.Background()
	pod := func(labels map[string]string) client.Object {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "p", Labels: labels}}
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{name: "a Deployment's pod", labels: map[string]string{"app": "api", "pod-template-hash": "abc"}, want: []string{"shop/named-hpa", "shop/payments", "shop/search"}},
		{name: "a StatefulSet's pod", labels: map[string]string{"app": "ledger"}, want: []string{"shop/ledger-db"}},
		{name: "nobody's pod", labels: map[string]string{"app": "batch"}, want: []string{}},
		{name: "no labels", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, names(env.mapper().quotasForPod(ctx, pod(tt.labels)))); diff != "" {
				t.Errorf("quotasForPod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigMapHandler(t *testing.T) {
	env := watchEnv()
	ctx := context.Background()
	h := env.mapper().configMapHandler(nil)
	owner := func(name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: name, UID: "u-" + types.UID(name)}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "api-backpressure", Labels: configMapLabels("api"),
			OwnerReferences: []metav1.OwnerReference{owner("payments"), owner("gone")}},
		Data: map[string]string{"payments.json": "p1", "gone.json": "g1", "search.json": "s1", "not a gate": "x"},
	}
	queued := func(fire func(workqueue.TypedRateLimitingInterface[reconcile.Request])) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		fire(q)
		var out []reconcile.Request
		for q.Len() > 0 {
			req, _ := q.Get()
			out = append(out, req)
			q.Done(req)
		}
		return names(out)
	}

	got := queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Create(ctx, event.CreateEvent{Object: cm}, q)
	})
	// Its gates, the deleted quota's included, and every quota publishing to
	// it: StatefulSet api's quota too, whose default name is the same.
	all := []string{"shop/gone", "shop/named-hpa", "shop/payments", "shop/same-name-other-kind", "shop/search"}
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("create (-want +got):\n%s", diff)
	}

	updated := cm.DeepCopy()
	updated.Data["payments.json"] = "p2"
	updated.OwnerReferences = updated.OwnerReferences[:1]
	updated.Data["not a gate"] = "y"
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.UpdateEvent{ObjectOld: cm, ObjectNew: updated}, q)
	})
	if diff := cmp.Diff([]string{"shop/gone", "shop/payments"}, got); diff != "" {
		t.Errorf("update of one key and one owner (-want +got):\n%s", diff)
	}

	// The reconciler's own write of payments' gate wakes nobody; another
	// content of the key, or the key without payments' owner reference,
	// wakes payments.
	env.pub.applied.note(types.NamespacedName{Namespace: "shop", Name: "payments"}, "api-backpressure", []byte("p2"))
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.UpdateEvent{ObjectOld: cm, ObjectNew: updated}, q)
	})
	if diff := cmp.Diff([]string{"shop/gone"}, got); diff != "" {
		t.Errorf("update by the reconciler's own apply (-want +got):\n%s", diff)
	}
	edited := updated.DeepCopy()
	edited.Data["payments.json"] = "p3"
	disowned := updated.DeepCopy()
	disowned.OwnerReferences = nil
	for name, next := range map[string]*corev1.ConfigMap{"edited": edited, "disowned": disowned} {
		got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.UpdateEvent{ObjectOld: updated, ObjectNew: next}, q)
		})
		if diff := cmp.Diff([]string{"shop/payments"}, got); diff != "" {
			t.Errorf("%s after the reconciler's apply (-want +got):\n%s", name, diff)
		}
	}

	relabelled := cm.DeepCopy()
	relabelled.Labels["team"] = "x"
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Update(ctx, event.UpdateEvent{ObjectOld: cm, ObjectNew: relabelled}, q)
	})
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("relabelled (-want +got):\n%s", diff)
	}

	custom := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "shared-gates"}}
	got = queued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Delete(ctx, event.DeleteEvent{Object: custom}, q)
	})
	if diff := cmp.Diff([]string{"shop/custom-cm"}, got); diff != "" {
		t.Errorf("delete of a named ConfigMap (-want +got):\n%s", diff)
	}
}

func TestPredicates(t *testing.T) {
	deploy := fakeDeployment("api", 2)
	update := func(o, n client.Object) event.UpdateEvent { return event.UpdateEvent{ObjectOld: o, ObjectNew: n} }
	with := func(edit func(*appsv1.Deployment)) *appsv1.Deployment {
		d := deploy.DeepCopy()
		edit(d)
		return d
	}
	hpa := fakeHPA("api", "Deployment", "api", 2)
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "api"}, Annotations: map[string]string{"other": "1"}}}
	podWith := func(edit func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
		p := pod.DeepCopy()
		edit(p)
		return p
	}
	now := metav1.Now()
	shared := fakeQuota("payments", "Deployment", "api")
	shared.Spec.ContractRef = &v1alpha1.ContractReference{Name: "logistics"}
	saying := func(q *v1alpha1.DownstreamQuota, reason string) *v1alpha1.DownstreamQuota {
		q = q.DeepCopy()
		meta.SetStatusCondition(&q.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason})
		return q
	}
	missing := saying(shared, v1alpha1.ReasonContractNotFound)
	alone := fakeQuota("payments", "Deployment", "api")

	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"workload spec replicas", workloadChanged.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) }))), true},
		{"workload status replicas", workloadChanged.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Status.Replicas = 3 }))), true},
		{"workload selector", workloadChanged.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Spec.Selector.MatchLabels["v"] = "2" }))), true},
		{"workload ready count", workloadChanged.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Status.ReadyReplicas = 1 }))), false},
		{"workload annotation", workloadChanged.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Annotations = map[string]string{"a": "b"} }))), false},
		{"hpa desired", hpaChanged.Update(update(hpa, func() client.Object { h := hpa.DeepCopy(); h.Status.DesiredReplicas = 9; return h }())), true},
		{"hpa max", hpaChanged.Update(update(hpa, func() client.Object { h := hpa.DeepCopy(); h.Spec.MaxReplicas = 9; return h }())), true},
		{"hpa target", hpaChanged.Update(update(hpa, func() client.Object { h := hpa.DeepCopy(); h.Spec.ScaleTargetRef.Name = "web"; return h }())), true},
		{"hpa metrics only", hpaChanged.Update(update(hpa, func() client.Object { h := hpa.DeepCopy(); h.Status.ObservedGeneration = ptr.To[int64](4); return h }())), false},
		{"pod labels", podChanged.Update(update(pod, podWith(func(p *metav1.PartialObjectMetadata) { p.Labels["v"] = "2" }))), true},
		{"pod terminating", podChanged.Update(update(pod, podWith(func(p *metav1.PartialObjectMetadata) { p.DeletionTimestamp = &now }))), true},
		{"pod acknowledges", podChanged.Update(update(pod, podWith(func(p *metav1.PartialObjectMetadata) { p.Annotations[appliedAnnotation("payments")] = "h" }))), true},
		{"pod other annotation", podChanged.Update(update(pod, podWith(func(p *metav1.PartialObjectMetadata) { p.Annotations["other"] = "2" }))), false},
		{"pod status only", podChanged.Update(update(pod, podWith(func(p *metav1.PartialObjectMetadata) { p.ResourceVersion = "9" }))), false},
		{"quota deletion starts", deletionStarted.Update(update(deploy, with(func(d *appsv1.Deployment) { d.DeletionTimestamp = &now }))), true},
		{"quota metadata", deletionStarted.Update(update(deploy, with(func(d *appsv1.Deployment) { d.Labels = map[string]string{"a": "b"} }))), false},
		{"shared quota's Ready leaves ContractNotFound", contractFoundAgain.Update(update(missing, saying(shared, v1alpha1.ReasonPlanPublished))), true},
		{"shared quota's Ready says ContractNotFound again", contractFoundAgain.Update(update(missing, saying(missing, v1alpha1.ReasonContractNotFound))), false},
		{"shared quota's Ready comes to ContractNotFound", contractFoundAgain.Update(update(saying(shared, v1alpha1.ReasonPlanPublished), missing)), false},
		{"quota of its own leaves ContractNotFound", contractFoundAgain.Update(update(saying(alone, v1alpha1.ReasonContractNotFound), saying(alone, v1alpha1.ReasonPlanPublished))), false},
		{"quota created", contractFoundAgain.Create(event.CreateEvent{Object: shared}), false},
		{"quota starts publishing", publishingChanged.Update(update(shared, func() client.Object {
			q := shared.DeepCopy()
			q.Status.ConfigMap = &v1alpha1.PublishedConfigMap{Name: "api-backpressure"}
			return q
		}())), true},
		{"quota's Ready changes, publishing not", publishingChanged.Update(update(shared, missing)), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: predicate passed %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
