package pods_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/pods"
)

var controlPlane testenv.Shared

func TestMain(m *testing.M) { controlPlane.Main(m) }

const (
	gate      = "logistics-api"
	workload  = "search-gateway"
	configMap = workload + v1alpha1.ConfigMapSuffix
)

// fixture is a namespace with a StatefulSet (which no controller runs
// here: the test creates its pods) and, when asked, a quota naming it.
type fixture struct {
	t   *testing.T
	cs  kubernetes.Interface
	ns  string
	sts *appsv1.StatefulSet
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cs, ns := controlPlane.Namespace(t, "pods")
	labels := map[string]string{"app": workload}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: workload},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
			},
		},
	}
	sts, err := cs.AppsV1().StatefulSets(ns).Create(t.Context(), sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, cs: cs, ns: ns, sts: sts}
}

// run runs the pods of the fixture's namespace until the test ends, and
// shows what they logged when it fails.
func (f *fixture) run(acknowledge bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &lockedBuilder{}
	go func() {
		done <- pods.Run(ctx, pods.Options{
			Config:        controlPlane.Config(f.t),
			Namespace:     f.ns,
			StartDelay:    10 * time.Millisecond,
			Acknowledge:   acknowledge,
			RetryInterval: 50 * time.Millisecond,
			Log:           slog.New(slog.NewTextHandler(logs, nil)),
		})
	}()
	f.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				f.t.Error(err)
			}
		case <-time.After(time.Minute):
			f.t.Error("pods.Run did not return within a minute of its context's end")
		}
		if f.t.Failed() {
			f.t.Logf("pods' log:\n%s", logs.String())
		}
	})
}

type lockedBuilder struct {
	mu sync.Mutex
	strings.Builder
}

func (b *lockedBuilder) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Builder.Write(p)
}

func (b *lockedBuilder) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Builder.String()
}

// createPod creates a pod of the StatefulSet, as its controller would.
func (f *fixture) createPod(name string) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: f.sts.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "StatefulSet", Name: f.sts.Name, UID: f.sts.UID, Controller: ptr.To(true),
			}},
		},
		Spec: f.sts.Spec.Template.Spec,
	}
	p, err := f.cs.CoreV1().Pods(f.ns).Create(f.t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// createQuota creates a quota naming the StatefulSet, through the API
// server's own validation.
func (f *fixture) createQuota() {
	f.t.Helper()
	body := fmt.Sprintf(`{"apiVersion":"backpressure.dev/v1alpha1","kind":"DownstreamQuota","metadata":{"name":%q},
"spec":{"workloadRef":{"kind":"StatefulSet","name":%q},"downstream":"logistics.example.com","contract":{"concurrency":10},
"latency":{"typical":"100ms"},"deadline":"1s"}}`, gate, workload)
	err := f.cs.CoreV1().RESTClient().Post().AbsPath("/apis/backpressure.dev/v1alpha1/namespaces", f.ns, "downstreamquotas").
		Body([]byte(body)).SetHeader("Content-Type", "application/json").Do(f.t.Context()).Error()
	if err != nil {
		f.t.Fatal(err)
	}
}

// publish writes revision rev of the gate's plan, giving each named pod
// its permits, into the workload's ConfigMap, as the operator would.
func (f *fixture) publish(rev int64, shares map[string]int) {
	f.t.Helper()
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: "logistics.example.com", Generation: 1,
		Epoch: "epoch-1", Revision: rev, Permits: 0, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.1, DeadlineSeconds: 1, Pods: map[string]plan.PodShare{},
	}
	for pod, permits := range shares {
		d.Pods[pod] = plan.PodShare{Permits: permits, Workers: permits}
	}
	d.Hash = plan.Hash(d)
	data, err := plan.Marshal(d)
	if err != nil {
		f.t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMap}, Data: map[string]string{plan.KeyFor(gate): string(data)}}
	ctx := f.t.Context()
	if _, err := f.cs.CoreV1().ConfigMaps(f.ns).Update(ctx, cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = f.cs.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
	} else if err != nil {
		f.t.Fatal(err)
	}
}

// pod reads a pod; nil once it is gone.
func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	p, err := f.cs.CoreV1().Pods(f.ns).Get(f.t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func ready(p *corev1.Pod) bool {
	if p == nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func acknowledged(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Annotations[v1alpha1.AppliedAnnotationPrefix+gate]
}

// eventually polls cond every 20ms for up to 30s.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A pod of a workload that a quota names is bound and Running, turns Ready
// only once its plan is published, and acknowledges every revision it is
// given; a deleted pod hands its share back and is then deleted for good.
func TestPodsFollowTheirPlansAndAcknowledge(t *testing.T) {
	f := newFixture(t)
	f.createQuota()
	f.run(true)
	f.createPod("search-gateway-0")

	f.eventually("the pod Running and bound to the node", func() bool {
		p := f.pod("search-gateway-0")
		return p != nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == pods.DefaultNode
	})
	// No plan yet: the library cannot open, so the pod is not Ready.
	time.Sleep(300 * time.Millisecond)
	if p := f.pod("search-gateway-0"); ready(p) {
		t.Fatalf("the pod is Ready before its plan is published: %+v", p.Status.Conditions)
	}

	f.publish(1, map[string]int{"search-gateway-0": 0})
	f.eventually("the pod Ready and acknowledging revision 1", func() bool {
		p := f.pod("search-gateway-0")
		return ready(p) && acknowledged(p) == "epoch-1/1"
	})
	f.publish(2, map[string]int{"search-gateway-0": 8})
	f.eventually("revision 2 acknowledged", func() bool { return acknowledged(f.pod("search-gateway-0")) == "epoch-1/2" })

	// A graceful delete of a bound pod waits for its kubelet: the share is
	// handed back first, then the pod goes.
	w, err := f.cs.CoreV1().Pods(f.ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=search-gateway-0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := f.cs.CoreV1().Pods(f.ns).Delete(t.Context(), "search-gateway-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	timeout := time.After(30 * time.Second)
	for gone := false; !gone; {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok {
				seen = append(seen, string(ev.Type)+" "+acknowledged(p))
			}
			gone = ev.Type == "DELETED"
		case <-timeout:
			t.Fatalf("the pod was not deleted within 30s; its events: %q", seen)
		}
	}
	if len(seen) < 2 || seen[len(seen)-1] != "DELETED epoch-1/released" {
		t.Errorf("the pod's last events are %q, want it deleted after acknowledging epoch-1/released", seen)
	}
}

// Without acknowledgements the pods follow their plans but never annotate
// themselves; a pod whose workload no quota names turns Ready without the
// library, and follows a quota created after it.
func TestPodsWithoutAcknowledgementsOrQuota(t *testing.T) {
	t.Run("no acknowledgements", func(t *testing.T) {
		f := newFixture(t)
		f.createQuota()
		f.publish(1, map[string]int{"search-gateway-0": 4})
		f.run(false)
		f.createPod("search-gateway-0")
		f.eventually("the pod Ready", func() bool { return ready(f.pod("search-gateway-0")) })
		time.Sleep(300 * time.Millisecond)
		if a := acknowledged(f.pod("search-gateway-0")); a != "" {
			t.Errorf("the pod acknowledged %q with acknowledgements off", a)
		}
	})
	t.Run("no quota, then one", func(t *testing.T) {
		f := newFixture(t)
		f.run(true)
		f.createPod("search-gateway-1")
		f.eventually("the pod Ready", func() bool { return ready(f.pod("search-gateway-1")) })
		// kubectl apply of a workload and its quota creates the pods
		// first: the quota that comes after is followed and acknowledged.
		f.createQuota()
		f.publish(1, map[string]int{"search-gateway-1": 3})
		f.eventually("revision 1 acknowledged", func() bool { return acknowledged(f.pod("search-gateway-1")) == "epoch-1/1" })
	})
}
