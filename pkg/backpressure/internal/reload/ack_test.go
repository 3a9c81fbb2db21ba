package reload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

func getenvFrom(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

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
	a1, a2, b1, l1 := doc("a", 1), doc("a", 2), doc("b", 1), doc(long, 1)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("plans", map[string]string{
		"a.json": encode(t, a1), "b.json": encode(t, b1), long + ".json": encode(t, l1),
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	logs := &logSink{}
	s, err := NewConfigMapSource(ctx, client, ns, "plans", Options{
		Subscriber: rec.subscribe,
		Logger:     logs.logger(),
		Ack:        &AckOptions{Getenv: getenvFrom(map[string]string{EnvPodName: "gateway-0", EnvPodNamespace: ns})},
	})
	if err != nil {
		t.Fatal(err)
	}
	startSource(t, s.Start)
	rec.next(t)
	waitForAnnotations(t, client, ns, "gateway-0", map[string]string{
		plan.AppliedAnnotationPrefix + "a": plan.AckFor(a1).String(), plan.AppliedAnnotationPrefix + "b": plan.AckFor(b1).String(),
	})
	if logs.count("Cannot acknowledge a gate whose name does not fit an annotation key") != 1 {
		t.Errorf("the unacknowledgeable gate was not reported once:\n%s", logs)
	}

	updateConfigMap(t, client, ns, "plans", map[string]string{"a.json": encode(t, a2), long + ".json": encode(t, l1)})
	rec.waitFor(t, func(u Update) bool { return plan.Equal(u.Plans["a"], a2) })
	// b is orphaned but still in force, so its acknowledgement stays.
	waitForAnnotations(t, client, ns, "gateway-0", map[string]string{
		plan.AppliedAnnotationPrefix + "a": plan.AckFor(a2).String(), plan.AppliedAnnotationPrefix + "b": plan.AckFor(b1).String(),
	})
	if got := testutil.ToFloat64(s.tracker.metrics.acks.WithLabelValues(ResultError)); got != 0 {
		t.Errorf("acknowledgement errors: %v", got)
	}
}

func TestAcknowledgementRetriesUntilThePodExists(t *testing.T) {
	client, ns := testNamespace(t)
	ctx := context.Background()
	a1 := doc("a", 1)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, configMap("plans", map[string]string{"a.json": encode(t, a1)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vol := newVolume(t, map[string]string{"a.json": encode(t, a1)})
	rec := newRecorder()
	logs := &logSink{}
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{
		Subscriber: rec.subscribe,
		Logger:     logs.logger(),
		Ack: &AckOptions{
			Client:  client,
			Getenv:  getenvFrom(map[string]string{EnvPodName: "gateway-1", EnvPodNamespace: ns}),
			Backoff: fastRetry,
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stop := startSource(t, s.Start)
	rec.next(t)

	// No pod yet: the patch fails and is retried, and the source goes on.
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.acks.WithLabelValues(ResultError)) >= 3 })
	vol.write(map[string]string{"a.json": encode(t, doc("a", 5))})
	rec.waitFor(t, func(u Update) bool { return u.Plans["a"].Permits == 5 })
	if logs.count("Could not acknowledge the applied plans") < 3 {
		t.Errorf("failures were not logged:\n%s", logs)
	}

	createPod(t, client, ns, "gateway-1")
	waitForAnnotations(t, client, ns, "gateway-1", map[string]string{plan.AppliedAnnotationPrefix + "a": plan.AckFor(doc("a", 5)).String()})
	stop() // Start returns promptly, the acknowledging goroutine included.
}

func TestAcknowledgementNeedsThePodsName(t *testing.T) {
	vol := newVolume(t, map[string]string{"a.json": encode(t, doc("a", 1))})
	logs := &logSink{}
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{
		Subscriber: func(Update) {},
		Logger:     logs.logger(),
		Ack:        &AckOptions{Getenv: getenvFrom(map[string]string{EnvPodNamespace: "shop"})},
	}})
	if err != nil {
		t.Fatalf("a missing POD_NAME must not be fatal: %v", err)
	}
	if s.acker != nil {
		t.Error("acknowledgement is on without POD_NAME")
	}
	if logs.count("plans will not be acknowledged") != 1 {
		t.Errorf("the disabled acknowledgement was not logged:\n%s", logs)
	}

	// With the pod known, a DirSource needs a client to patch it.
	_, err = NewDirSource(vol.dir, DirOptions{Options: Options{
		Subscriber: func(Update) {},
		Ack:        &AckOptions{Getenv: getenvFrom(map[string]string{EnvPodName: "p", EnvPodNamespace: "shop"})},
	}})
	if err == nil {
		t.Error("acknowledgement without a client was accepted")
	}
}
