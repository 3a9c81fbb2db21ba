package controller

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// readCounter counts the reads a client serves, by verb and type.
type readCounter struct {
	mu    sync.Mutex
	reads map[string]int
}

func (c *readCounter) count(verb string, obj any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[fmt.Sprintf("%s %T", verb, obj)]++
}

// take returns the reads counted so far and starts again from none.
func (c *readCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reads
	c.reads = map[string]int{}
	return out
}

// fanOutEnv has, in namespace shop, watchEnv's workloads and quotas plus
// fillers Deployments without quotas, and in namespace quiet fillers
// Deployments and a StatefulSet and no quota at all. Every read of its
// reconciler's client (newFakeEnv's, with the production indexes) is
// counted.
func fanOutEnv(t *testing.T, fillers int) (*mapper, *readCounter) {
	t.Helper()
	named := fakeQuota("named-hpa", "Deployment", "api")
	named.Spec.HPAName = "api-custom"
	objs := []client.Object{
		fakeDeployment("api", 2), fakeDeployment("web", 2), fakeStatefulSet("ledger", 3),
		fakeQuota("payments", "Deployment", "api"), fakeQuota("search", "Deployment", "api"), named,
		fakeQuota("checkout", "Deployment", "web"),
		fakeQuota("ledger-db", "StatefulSet", "ledger"),
		fakeQuota("same-name-other-kind", "StatefulSet", "api"),
	}
	quietSTS := fakeStatefulSet("db", 3)
	quietSTS.Namespace = "quiet"
	objs = append(objs, quietSTS)
	for i := range fillers {
		objs = append(objs, fakeDeployment(fmt.Sprintf("filler-%d", i), 1))
		quiet := fakeDeployment(fmt.Sprintf("app-%d", i), 1)
		quiet.Namespace = "quiet"
		objs = append(objs, quiet)
	}
	env := newFakeEnv(objs...)
	reads := &readCounter{reads: map[string]int{}}
	c := interceptor.NewClient(env.client, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads.count("get", obj)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			reads.count("list", list)
			return c.List(ctx, list, opts...)
		},
	})
	return &mapper{client: c, applied: &appliedGates{}}, reads
}

// ownedPod returns a pod of namespace ns with labels, controlled by the
// object of apiVersion and kind named owner ("" for none).
func ownedPod(ns, name, apiVersion, kind, owner string, labels map[string]string) *corev1.Pod {
	pod := fakePod(name, labels)
	pod.Namespace = ns
	if owner != "" {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: apiVersion, Kind: kind, Name: owner, UID: types.UID("uid-" + owner), Controller: ptr.To(true),
		}}
	}
	return pod
}

// deploymentPod returns a pod of Deployment workload, as its ReplicaSet of
// template hash hash creates it.
func deploymentPod(ns, workload, hash string) *corev1.Pod {
	return ownedPod(ns, workload+"-"+hash+"-x1", "apps/v1", "ReplicaSet", workload+"-"+hash,
		map[string]string{"app": workload, "pod-template-hash": hash})
}

// enqueued returns what the pod watch's handler queues for a creation, an
// update and a deletion of pod.
func enqueued(r *mapper, pod *corev1.Pod) []string {
	ctx := context.Background()
	h := handler.EnqueueRequestsFromMapFunc(r.quotasForPod)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	changed := pod.DeepCopy()
	changed.Status.Conditions[0].Status = corev1.ConditionFalse
	h.Create(ctx, event.CreateEvent{Object: pod}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod, ObjectNew: changed}, q)
	h.Delete(ctx, event.DeleteEvent{Object: changed}, q)
	var out []reconcile.Request
	for q.Len() > 0 {
		req, _ := q.Get()
		out = append(out, req)
		q.Done(req)
	}
	return names(out)
}

// TestPodEventInNamespaceWithoutQuotas: a pod event in a namespace that
// holds no quota queues nothing, lists no workload and no pod, reads no
// workload, and costs at most one lookup in the quota cache per mapping,
// however many workloads the namespace holds.
func TestPodEventInNamespaceWithoutQuotas(t *testing.T) {
	for _, fillers := range []int{1, 300} {
		r, reads := fanOutEnv(t, fillers)
		pods := map[string]*corev1.Pod{
			"a Deployment's pod": deploymentPod("quiet", "app-0", "5d8f7b9c4"),
			"a StatefulSet's pod": ownedPod("quiet", "db-0", "apps/v1", "StatefulSet", "db",
				map[string]string{"app": "db"}),
			"a pod created alone": ownedPod("quiet", "debug", "", "", "", map[string]string{"app": "app-0"}),
			"a Job's pod": ownedPod("quiet", "job-x", "batch/v1", "Job", "job",
				map[string]string{"app": "app-0"}),
		}
		for name, pod := range pods {
			t.Run(fmt.Sprintf("%s among %d workloads", name, fillers+1), func(t *testing.T) {
				reads.take()
				if got := enqueued(r, pod); len(got) != 0 {
					t.Errorf("queued %v", got)
				}
				// Create, update (old and new) and delete: four mappings.
				for read, n := range reads.take() {
					if read != "list *v1alpha1.DownstreamQuotaList" || n > 4 {
						t.Errorf("%s: %d times, want only up to 4 lists of quotas", read, n)
					}
				}
			})
		}
	}
}

// TestPodEventOfOneWorkload: a pod that a workload controls queues that
// workload's quotas only, through one lookup in the quota index, whatever
// else its namespace holds and whatever else its labels match.
func TestPodEventOfOneWorkload(t *testing.T) {
	r, reads := fanOutEnv(t, 300)
	ctx := context.Background()
	apiQuotas := []string{"shop/named-hpa", "shop/payments", "shop/search"}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		want  []string
		reads map[string]int
	}{
		{
			name: "a Deployment's pod", pod: deploymentPod("shop", "api", "5d8f7b9c4"), want: apiQuotas,
			reads: map[string]int{"list *v1alpha1.DownstreamQuotaList": 1},
		},
		{
			name: "a StatefulSet's pod", pod: ownedPod("shop", "ledger-0", "apps/v1", "StatefulSet", "ledger", map[string]string{"app": "ledger"}),
			want: []string{"shop/ledger-db"}, reads: map[string]int{"list *v1alpha1.DownstreamQuotaList": 1},
		},
		{
			name: "a StatefulSet's pod, named as a Deployment", pod: ownedPod("shop", "api-0", "apps/v1", "StatefulSet", "api", map[string]string{"app": "api"}),
			want: []string{"shop/same-name-other-kind"}, reads: map[string]int{"list *v1alpha1.DownstreamQuotaList": 1},
		},
		{
			name: "a Deployment's pod without quotas", pod: deploymentPod("shop", "filler-7", "5d8f7b9c4"),
			want: []string{}, reads: map[string]int{"list *v1alpha1.DownstreamQuotaList": 1},
		},
		{
			name: "a Job's pod with a workload's labels", pod: ownedPod("shop", "job-x", "batch/v1", "Job", "job", map[string]string{"app": "api"}),
			want: []string{}, reads: map[string]int{},
		},
		{
			// Matched by selector: the namespace's quotas name four
			// workloads (StatefulSet api does not exist), each read once,
			// the 300 Deployments without quotas never.
			name: "a pod created alone", pod: ownedPod("shop", "debug", "", "", "", map[string]string{"app": "api"}),
			want: apiQuotas, reads: map[string]int{
				"list *v1alpha1.DownstreamQuotaList": 1, "get *v1.Deployment": 2, "get *v1.StatefulSet": 2,
			},
		},
		{
			name: "a pod of a ReplicaSet no Deployment made", pod: ownedPod("shop", "rs-x", "apps/v1", "ReplicaSet", "standalone", map[string]string{"app": "web"}),
			want: []string{"shop/checkout"}, reads: map[string]int{
				"list *v1alpha1.DownstreamQuotaList": 1, "get *v1.Deployment": 2, "get *v1.StatefulSet": 2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads.take()
			if diff := cmp.Diff(tt.want, names(r.quotasForPod(ctx, tt.pod))); diff != "" {
				t.Errorf("quotasForPod (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.reads, reads.take()); diff != "" {
				t.Errorf("reads (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, enqueued(r, tt.pod)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodWorkload(t *testing.T) {
	const hash = "5d8f7b9c4"
	longest := strings.Repeat("a", 253-1-len(hash))
	tests := []struct {
		name      string
		pod       *corev1.Pod
		wantKey   string
		wantOwner podOwner
	}{
		{name: "Deployment", pod: deploymentPod("shop", "api", hash), wantKey: "Deployment/api", wantOwner: ownerWorkload},
		{name: "Deployment with a dashed name", pod: deploymentPod("shop", "search-gateway-v2", hash), wantKey: "Deployment/search-gateway-v2", wantOwner: ownerWorkload},
		{name: "Deployment one below the cut", pod: deploymentPod("shop", longest[1:], hash), wantKey: "Deployment/" + longest[1:], wantOwner: ownerWorkload},
		{name: "Deployment name maybe cut short", pod: deploymentPod("shop", longest, hash), wantOwner: ownerUnknown},
		{name: "StatefulSet", pod: ownedPod("shop", "db-0", "apps/v1", "StatefulSet", "db", nil), wantKey: "StatefulSet/db", wantOwner: ownerWorkload},
		{name: "ReplicaSet without the hash label", pod: ownedPod("shop", "p", "apps/v1", "ReplicaSet", "api-"+hash, map[string]string{"app": "api"}), wantOwner: ownerUnknown},
		{name: "ReplicaSet of another hash", pod: ownedPod("shop", "p", "apps/v1", "ReplicaSet", "api-abc", map[string]string{"pod-template-hash": hash}), wantOwner: ownerUnknown},
		{name: "ReplicaSet named only the hash", pod: ownedPod("shop", "p", "apps/v1", "ReplicaSet", "-"+hash, map[string]string{"pod-template-hash": hash}), wantOwner: ownerUnknown},
		{name: "no owner", pod: ownedPod("shop", "p", "", "", "", nil), wantOwner: ownerUnknown},
		{name: "DaemonSet", pod: ownedPod("shop", "p", "apps/v1", "DaemonSet", "agent", nil), wantOwner: ownerOther},
		{name: "Job", pod: ownedPod("shop", "p", "batch/v1", "Job", "x", nil), wantOwner: ownerOther},
		{name: "a StatefulSet of another group", pod: ownedPod("shop", "p", "other.dev/v1", "StatefulSet", "x", nil), wantOwner: ownerOther},
		{name: "an owner that is not the controller", pod: func() *corev1.Pod {
			p := ownedPod("shop", "p", "apps/v1", "StatefulSet", "db", nil)
			p.OwnerReferences[0].Controller = nil
			return p
		}(), wantOwner: ownerUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, owner := podWorkload(tt.pod)
			if key != tt.wantKey || owner != tt.wantOwner {
				t.Errorf("podWorkload = %q, %d; want %q, %d", key, owner, tt.wantKey, tt.wantOwner)
			}
		})
	}
}

// TestPodFanOutIndependentOfNamespace: the reads a workload's pod costs do
// not grow with the workloads of its namespace.
func TestPodFanOutIndependentOfNamespace(t *testing.T) {
	per := map[int]map[string]int{}
	for _, fillers := range []int{0, 500} {
		r, reads := fanOutEnv(t, fillers)
		reads.take()
		for i := range 50 {
			r.quotasForPod(context.Background(), deploymentPod("shop", "api", fmt.Sprintf("h%d", i)))
		}
		per[fillers] = reads.take()
	}
	if !maps.Equal(per[0], per[500]) {
		t.Errorf("reads of 50 pod events: %v with no other workloads, %v with 500", per[0], per[500])
	}
}

var _ = Describe("Pod events", func() {
	It("reach the quotas of the Deployment or StatefulSet that owns the pod", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, newDeployment(ns, "api", 3))).To(Succeed())
		db := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
			Spec: appsv1.StatefulSetSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}},
				},
			},
		}
		Expect(k8s.Create(ctx, db)).To(Succeed())
		Expect(k8s.Create(ctx, newQuota(ns, "payments", "api", 50))).To(Succeed())
		ledger := newQuota(ns, "ledger", "db", 50)
		ledger.Spec.WorkloadRef.Kind = "StatefulSet"
		Expect(k8s.Create(ctx, ledger)).To(Succeed())
		readyPods := func(quota string, want int) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				q := getQuota(ctx, g, ns, quota)
				g.Expect(replicasOf(g, q).ReadyPods).To(BeEquivalentTo(want))
			}).Should(Succeed())
		}
		readyPods("payments", 0)
		readyPods("ledger", 0)

		// The pods come after the quotas: only their own events can tell
		// the quotas, through their owner references.
		create := func(pod *corev1.Pod) *corev1.Pod {
			GinkgoHelper()
			pod.Namespace = ns
			pod.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}
			pod.Status = corev1.PodStatus{}
			Expect(k8s.Create(ctx, pod)).To(Succeed())
			return pod
		}
		var apiPods, dbPods []*corev1.Pod
		for i := range 3 {
			apiPods = append(apiPods, create(deploymentPod(ns, "api", fmt.Sprintf("5d8f7b9c%d", i))))
		}
		for i := range 2 {
			dbPods = append(dbPods, create(ownedPod(ns, fmt.Sprintf("db-%d", i), "apps/v1", "StatefulSet", "db", map[string]string{"app": "db"})))
		}
		setReady(ctx, apiPods[:2]...)
		setReady(ctx, dbPods[0])
		readyPods("payments", 2)
		readyPods("ledger", 1)
		setReady(ctx, apiPods[2], dbPods[1])
		readyPods("payments", 3)
		readyPods("ledger", 2)
	})
})
