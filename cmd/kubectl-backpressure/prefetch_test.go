package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// A view of many quotas reads each namespace's workloads and pods once,
// and shows exactly what reading them quota by quota shows: the pods of
// each workload and no other's, a missing workload, a StatefulSet, and the
// shared contract read once.
func TestStatusOfManyQuotasListsEachNamespaceOnce(t *testing.T) {
	scheme, err := newLiveScheme()
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	var quotas []v1alpha1.DownstreamQuota
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	pod := func(ns, name, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}}}
	}
	objs = append(objs, &v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: "logistics"}})
	for _, ns := range []string{"shop", "warehouse"} {
		objs = append(objs,
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gateway"}, Spec: appsv1.DeploymentSpec{Selector: selector("gateway")}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "worker"}, Spec: appsv1.DeploymentSpec{Selector: selector("worker")}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ledger"}, Spec: appsv1.StatefulSetSpec{Selector: selector("ledger")}},
			pod(ns, "gateway-b", "gateway"), pod(ns, "gateway-a", "gateway"), pod(ns, "worker-a", "worker"),
			pod(ns, "ledger-0", "ledger"), pod(ns, "stray", "other"),
		)
		for i, w := range []v1alpha1.WorkloadReference{
			{Kind: "Deployment", Name: "gateway"},
			{Kind: "Deployment", Name: "worker"},
			{Kind: "StatefulSet", Name: "ledger"},
			{Kind: "Deployment", Name: "gone"},
			{Kind: "StatefulSet", Name: "gateway"}, // a Deployment's name, not a StatefulSet's
		} {
			q := v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("q%d", i)}}
			q.Spec.Downstream = "logistics.example.com"
			q.Spec.WorkloadRef = w
			if i%2 == 0 {
				q.Spec.ContractRef = &v1alpha1.ContractReference{Name: "logistics"}
			}
			quotas = append(quotas, q)
		}
	}
	var requests atomic.Int64
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			requests.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			requests.Add(1)
			return c.List(ctx, list, opts...)
		},
	}).Build()

	views := func(prefetch bool) []*quotaStatus {
		t.Helper()
		requests.Store(0)
		cl := &cluster{client: c}
		if prefetch {
			cl.prefetch(t.Context(), []string{"shop", "warehouse"})
		}
		var out []*quotaStatus
		for i := range quotas {
			v, err := cl.statusOf(t.Context(), &quotas[i])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	one := views(false)
	oneByOne := requests.Load()
	listed := views(true)
	if diff := cmp.Diff(one, listed); diff != "" {
		t.Errorf("the views differ (-quota by quota +listed once):\n%s", diff)
	}
	// Quota by quota: a workload Get and a pod List for each quota whose
	// workload exists, a Get for each that does not, the contract once.
	if want := int64(2*(3*2+2*1) + 1); oneByOne != want {
		t.Errorf("quota by quota: %d requests, want %d", oneByOne, want)
	}
	// Listed: Deployments, StatefulSets and pods of each namespace, the
	// contract once.
	if got, want := requests.Load(), int64(2*3+1); got != want {
		t.Errorf("listed once: %d requests, want %d", got, want)
	}
	if got := names(listed[0].Pods); !cmp.Equal(got, []string{"gateway-a", "gateway-b"}) {
		t.Errorf("the pods of shop/q0: %v", got)
	}
	if got := names(listed[2].Pods); !cmp.Equal(got, []string{"ledger-0"}) {
		t.Errorf("the pods of shop/q2: %v", got)
	}
	for _, i := range []int{3, 4} {
		if len(listed[i].Problems) != 1 {
			t.Errorf("%s: problems %q, want the workload not found", listed[i].Metadata.Name, listed[i].Problems)
		}
	}
}

func names(pods []podView) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// The view of a quota with a reserve lists the pods of its broker's
// Deployment as its replicas, listed once or read quota by quota, and says
// when that Deployment is missing.
func TestStatusOfReadsTheBrokersPods(t *testing.T) {
	scheme, err := newLiveScheme()
	if err != nil {
		t.Fatal(err)
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	pod := func(name, app string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": app}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gateway"}, Spec: appsv1.DeploymentSpec{Selector: selector("gateway")}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "broker"}, Spec: appsv1.DeploymentSpec{Selector: selector("broker")}},
		pod("gateway-a", "gateway"), pod("broker-b", "broker"), pod("broker-a", "broker"),
	).Build()
	q := &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "q"}}
	q.Spec.WorkloadRef = v1alpha1.WorkloadReference{Kind: "Deployment", Name: "gateway"}
	q.Spec.Reserve = &v1alpha1.Reserve{BrokerRef: v1alpha1.BrokerReference{Name: "broker"}}
	q.Status.Reserve = &v1alpha1.ReserveStatus{Broker: "broker", Permits: 8, HandedOut: 8, Replicas: []v1alpha1.PodShareStatus{
		{Name: "broker-a", Permits: 4}, {Name: "broker-b", Permits: 4},
	}}
	for _, prefetch := range []bool{false, true} {
		cl := &cluster{client: c}
		if prefetch {
			cl.prefetch(t.Context(), []string{"shop"})
		}
		v, err := cl.statusOf(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		if v.Reserve == nil || !cmp.Equal(names(v.Reserve.Replicas), []string{"broker-a", "broker-b"}) || !v.Reserve.Replicas[0].Exists ||
			!cmp.Equal(names(v.Pods), []string{"gateway-a"}) {
			t.Errorf("prefetch %v: the reserve %+v and pods %v, want replicas broker-a and broker-b and pod gateway-a", prefetch, v.Reserve, names(v.Pods))
		}
	}
	q.Spec.Reserve.BrokerRef.Name = "absent"
	v, err := (&cluster{client: c}).statusOf(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"spec.reserve.brokerRef: Deployment/absent: not found in namespace shop"}; !cmp.Equal(v.Problems, want) {
		t.Errorf("problems %q, want %q", v.Problems, want)
	}
}
