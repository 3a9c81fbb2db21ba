package reload_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

// fastRetry keeps failure tests short.
var fastRetry = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 200 * time.Millisecond}

func createPod(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForAnnotations waits until the pod's applied annotations equal want.
func waitForAnnotations(t *testing.T, client kubernetes.Interface, ns, pod string, want map[string]string) {
	t.Helper()
	var got map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err == nil {
			got = map[string]string{}
			for k, v := range p.Annotations {
				if strings.HasPrefix(k, plan.AppliedAnnotationPrefix) {
					got[k] = v
				}
			}
			if equalMaps(got, want) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pod annotations %v, want %v", got, want)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestAcknowledgementAnnotatesThePod(t *testing.T) {
	client, ns := testNamespace(t)
	ctx := context.Background()
	createPod(t, client, ns, "gateway-0")
	long := strings.Repeat("g", 64) // a valid gate, too long for an annotation key's name
	a1, a2, b1, l1 := sourcetest.Doc("a", 1), sourcetest.Doc("a", 2), sourcetest.Doc("b", 1), sourcetest.Doc(long, 1)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap("plans", map[string]string{
		"a.json": sourcetest.Encode(t, a1), "b.json": sourcetest.Encode(t, b1), long + ".json": sourcetest.Encode(t, l1),
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := sourcetest.NewRecorder[reload.Update]()
	logs := &sourcetest.LogSink{}
	reg := prometheus.NewPedanticRegistry()
	s, err := reload.NewConfigMapSource(ctx, client, ns, "plans", reload.Options{
		Subscriber: rec.Subscribe,
		Registerer: reg,
		Logger:     logs.Logger(),
		Ack:        &reload.AckOptions{Getenv: envOf(map[string]string{reload.EnvPodName: "gateway-0", reload.EnvPodNamespace: ns})},
	})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Start(t, s.Start)
	rec.Next(t)
	waitForAnnotations(t, client, ns, "gateway-0", map[string]string{
		plan.AppliedAnnotationPrefix + "a": plan.AckFor(a1).String(), plan.AppliedAnnotationPrefix + "b": plan.AckFor(b1).String(),
	})
	if logs.Count("Cannot acknowledge a gate whose name does not fit an annotation key") != 1 {
		t.Errorf("the unacknowledgeable gate was not reported once:\n%s", logs)
	}

	sourcetest.UpdateConfigMap(t, client, ns, "plans", map[string]string{"a.json": sourcetest.Encode(t, a2), long + ".json": sourcetest.Encode(t, l1)})
	rec.WaitFor(t, func(u reload.Update) bool { return plan.Equal(u.Plans["a"], a2) })
	// b is orphaned but still in force, so its acknowledgement stays.
	waitForAnnotations(t, client, ns, "gateway-0", map[string]string{
		plan.AppliedAnnotationPrefix + "a": plan.AckFor(a2).String(), plan.AppliedAnnotationPrefix + "b": plan.AckFor(b1).String(),
	})
	if got := errorCount(t, reg, ackCounter); got != 0 {
		t.Errorf("acknowledgement errors: %v", got)
	}
}

func TestAcknowledgementRetriesUntilThePodExists(t *testing.T) {
	client, ns := testNamespace(t)
	ctx := context.Background()
	a1 := sourcetest.Doc("a", 1)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap("plans", map[string]string{"a.json": sourcetest.Encode(t, a1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, a1)})
	rec := sourcetest.NewRecorder[reload.Update]()
	logs := &sourcetest.LogSink{}
	reg := prometheus.NewPedanticRegistry()
	s, err := reload.NewDirSource(vol.Dir, reload.DirOptions{Options: reload.Options{
		Subscriber: rec.Subscribe,
		Registerer: reg,
		Logger:     logs.Logger(),
		Ack: &reload.AckOptions{
			Client:  client,
			Getenv:  envOf(map[string]string{reload.EnvPodName: "gateway-1", reload.EnvPodNamespace: ns}),
			Backoff: fastRetry,
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := sourcetest.Start(t, s.Start)
	rec.Next(t)

	// No pod yet: the patch fails and is retried, and the source goes on.
	sourcetest.WaitUntil(t, func() bool { return errorCount(t, reg, ackCounter) >= 3 })
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 5))})
	rec.WaitFor(t, func(u reload.Update) bool { return u.Plans["a"].Permits == 5 })
	if logs.Count("Could not acknowledge the applied plans") < 3 {
		t.Errorf("failures were not logged:\n%s", logs)
	}

	createPod(t, client, ns, "gateway-1")
	waitForAnnotations(t, client, ns, "gateway-1", map[string]string{plan.AppliedAnnotationPrefix + "a": plan.AckFor(sourcetest.Doc("a", 5)).String()})
	stop() // Start returns promptly, the acknowledging goroutine included.
}
