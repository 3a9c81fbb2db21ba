package backpressure_test

import (
	"context"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// ours matches a stack frame of the library or its source: a goroutine
// that runs one after Start has returned was leaked.
var ours = regexp.MustCompile(`backpressure-operator/pkg/backpressure(/[a-z]+)*\.|fsnotify`)

// goroutinesOfOurs returns the stacks of the goroutines not in before that
// run code of ours, keyed by goroutine header.
func goroutinesOfOurs(before map[string]bool) map[string]string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	leaked := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		if before != nil && before[id] {
			continue
		}
		if ours.MatchString(g) {
			leaked[id] = g
		}
	}
	return leaked
}

// goroutineIDs returns the headers ("goroutine N") of every goroutine.
func goroutineIDs() map[string]bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	ids := map[string]bool{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		ids[id] = true
	}
	return ids
}

// When Start's context ends, Start runs the dispatcher's queued tasks,
// drains the gate, releases the share and returns nil; and nothing it or
// its source started is left running: no watcher, no poller, no worker, no
// acknowledgement goroutine.
func TestStartShutsDownCleanly(t *testing.T) {
	before := goroutineIDs()
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 4))
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ackPod, Namespace: "shop"}})
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates:        []string{"logistics-api"},
		Dispatchers:  []string{"logistics-api"},
		OnApplied:    events.Hook,
		PodName:      ackPod,
		PodNamespace: "shop",
		Ack:          &backpressure.AckOptions{Client: client, Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: 50 * time.Millisecond}},
	})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Start(ctx) }()

	// Work on every layer: tasks that hold the gate's permits, more than
	// the workers, so that some are still queued when Start's context ends.
	g, d := sharetest.MustGate(t, rt, "logistics-api"), sharetest.MustDispatcher(t, rt, "logistics-api")
	release := make(chan struct{})
	var ran atomic.Int32
	for range 8 {
		if err := d.Submit(context.Background(), func(ctx context.Context) {
			_ = g.Do(ctx, func(context.Context) error {
				<-release
				ran.Add(1)
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A reload while it runs.
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 5))
	if x := events.Next(t); x.Share.Limits.Permits != 5 {
		t.Fatalf("reload: permits %d, want 5", x.Share.Limits.Permits)
	}
	sharetest.Eventually(t, 5*time.Second, "the pod acknowledges the reload", func() bool {
		return podAnnotation(t, client, "shop") == "epoch-1/6"
	})

	cancel()
	time.Sleep(50 * time.Millisecond) // Start is draining the dispatcher
	close(release)
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	if got := ran.Load(); got != 8 {
		t.Errorf("tasks run: %d of 8; Start must run the queued tasks before it stops", got)
	}
	if got := podAnnotation(t, client, "shop"); got != "epoch-1/released" {
		t.Errorf("annotation after Start: %q, want epoch-1/released", got)
	}
	if _, err := g.TryAcquire(context.Background()); err == nil {
		t.Error("the gate admits after Start has returned")
	}
	// Goroutines that have returned may take a moment to leave the
	// scheduler's list; one that is still running code of ours is a leak.
	var leaked map[string]string
	deadline := time.Now().Add(2 * time.Second)
	for {
		if leaked = goroutinesOfOurs(before); len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, stack := range leaked {
		t.Errorf("goroutine left running after Start returned:\n%s", stack)
	}
}

// podAnnotation returns the acknowledgement annotation of ackPod.
func podAnnotation(t *testing.T, client *fake.Clientset, ns string) string {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), ackPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[ackKey]
}
