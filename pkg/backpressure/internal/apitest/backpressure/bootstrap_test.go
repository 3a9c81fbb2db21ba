package backpressure_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

// Through the API server: the workload's ConfigMap does not exist when the
// pod starts, so it runs on its bootstrap share and leaves its applied
// annotation unwritten; once the operator creates the ConfigMap, the
// informer delivers it, the gate takes the published share, and only then
// is the revision acknowledged.
func TestBootstrapUntilTheConfigMapAppears(t *testing.T) {
	client, ns := controlPlane.Namespace(t, "runtime-bootstrap")
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ackPod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromConfigMap(client, ns, "plans"), backpressure.Options{
		Gates:         []string{ackGate},
		Registerer:    reg,
		OnApplied:     events.Hook,
		Bootstrap:     []backpressure.Share{sharetest.BootShare(ackGate, 1)},
		BootstrapWait: 200 * time.Millisecond,
		PodName:       ackPod,
		PodNamespace:  ns,
		Ack: &backpressure.AckOptions{
			Backoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 200 * time.Millisecond},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if x := events.Next(t); x.Share.Limits.Permits != 1 || x.Share.Epoch != "" {
		t.Fatalf("first plan: permits %d, epoch %q; want the bootstrap share", x.Share.Limits.Permits, x.Share.Epoch)
	}
	if got := sharetest.BootstrapGauge(t, reg, ackGate); got != "bootstrap" {
		t.Fatalf("metric says %s, want bootstrap", got)
	}
	sharetest.Start(t, rt)

	annotation := func() string {
		p, err := client.CoreV1().Pods(ns).Get(ctx, ackPod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations[ackKey]
	}
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := annotation(); got != "" {
			t.Fatalf("a pod on its bootstrap plan acknowledged %q", got)
		}
	}

	published := share(1, 3)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "plans"},
		Data:       map[string]string{plan.KeyFor(ackGate): sourcetest.Encode(t, published)},
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if x := events.Next(t); x.Share.Limits.Permits != 3 || x.Share.Revision != 1 {
		t.Fatalf("after the ConfigMap appeared: permits %d, revision %d; want 3, 1", x.Share.Limits.Permits, x.Share.Revision)
	}
	if got := sharetest.BootstrapGauge(t, reg, ackGate); got != "published" {
		t.Errorf("metric says %s, want published", got)
	}
	sharetest.Eventually(t, 10*time.Second, "the published revision is acknowledged", func() bool {
		return annotation() == "epoch-1/1"
	})
}
