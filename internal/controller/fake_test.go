package controller

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/writecount"
)

// fakeEnv is a reconciler over a fake client that has the production
// indexes, with its writes counted and its events recorded.
type fakeEnv struct {
	client   client.WithWatch
	writes   *writecount.Counter
	recorder *events.FakeRecorder
	clock    *clocktesting.FakePassiveClock
	pub      *Publisher
	r        *DownstreamQuotaReconciler
	// applyErr, when set, fails every server-side apply: a publication
	// that does not reach the API server.
	applyErr error
}

func newFakeEnv(objs ...client.Object) *fakeEnv {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.DownstreamQuota{}, &v1alpha1.DownstreamContract{})
	for _, ix := range indexer.Indexes() {
		b = b.WithIndex(ix.Object, ix.Field, ix.Extract)
	}
	env := &fakeEnv{writes: &writecount.Counter{}, recorder: events.NewFakeRecorder(1000),
		clock: clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	env.client = env.writes.Wrap(interceptor.NewClient(b.Build(), interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if env.applyErr != nil {
				return env.applyErr
			}
			return c.Apply(ctx, obj, opts...)
		},
	}))
	env.pub = NewPublisher(env.client, env.client, env.recorder, WithClock(env.clock), WithClockID("test"))
	env.r = NewDownstreamQuotaReconciler(env.pub)
	return env
}

// recorded drains the events recorded so far.
func (e *fakeEnv) recorded() []string {
	var out []string
	for {
		select {
		case ev := <-e.recorder.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func fakeDeployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
}

func fakeStatefulSet(name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		},
	}
}

func fakePod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: labels},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func fakeHPA(name, kind, target string, desired int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: target},
			MaxReplicas:    20,
		},
		Status: autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: desired, DesiredReplicas: desired},
	}
}

func fakeQuota(name, kind, workload string) *v1alpha1.DownstreamQuota {
	q := designQuota()
	q.Name, q.Namespace, q.Generation, q.UID = name, "shop", 1, types.UID("uid-"+name)
	q.Spec.WorkloadRef = v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: kind, Name: workload}
	return q
}

// mapper returns the event mapping of the environment's controllers.
func (e *fakeEnv) mapper() *mapper {
	return &mapper{client: e.client, applied: &e.pub.applied, releases: &e.pub.releases}
}
