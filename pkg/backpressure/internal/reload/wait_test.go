package reload

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// With WaitForPlan, a volume that stays empty (an optional ConfigMap that
// does not exist yet) yields an empty source once the wait has passed, and
// the kubelet's later update is delivered by fsnotify.
func TestDirSourceWaitForPlanThenFollows(t *testing.T) {
	vol := newVolume(t, nil)
	rec := newRecorder()
	logs := &logSink{}
	const wait = 300 * time.Millisecond
	began := time.Now()
	s, err := NewDirSource(vol.dir, DirOptions{
		Options:      Options{Subscriber: rec.subscribe, Logger: logs.logger(), WaitForPlan: wait},
		PollInterval: time.Hour, // only fsnotify can deliver
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < wait {
		t.Errorf("NewDirSource returned after %v, before the %v wait", took, wait)
	}
	if got := s.Plans(); len(got) != 0 {
		t.Fatalf("Plans = %v, want none", got)
	}
	if logs.count("No valid plan within the wait") != 1 {
		t.Errorf("the empty start is not logged once:\n%s", logs)
	}

	startDir(t, s)
	if u := rec.next(t); len(u.Plans) != 0 || len(u.Changed) != 0 {
		t.Fatalf("first update = %+v, want an empty one", u)
	}
	a := doc("a", 3)
	vol.write(map[string]string{"a.json": encode(t, a)})
	u := rec.next(t)
	if diff := cmp.Diff(map[string]plan.Document{"a": a}, u.Plans); diff != "" || !cmp.Equal(u.Changed, []string{"a"}) {
		t.Errorf("update after the volume was filled: changed %v, plans (-want +got):\n%s", u.Changed, diff)
	}
}

// A plan that appears during the wait ends it at once.
func TestDirSourceWaitForPlanEndsWhenAPlanAppears(t *testing.T) {
	vol := newVolume(t, nil)
	a := doc("a", 2)
	go func() {
		time.Sleep(100 * time.Millisecond)
		vol.write(map[string]string{"a.json": encode(t, a)})
	}()
	began := time.Now()
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{Subscriber: func(Update) {}, WaitForPlan: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("NewDirSource took %v though the plan appeared after 100ms", took)
	}
	if diff := cmp.Diff(map[string]plan.Document{"a": a}, s.Plans()); diff != "" {
		t.Errorf("Plans (-want +got):\n%s", diff)
	}
}

// A directory that cannot be read is retried during the wait and counted as
// one failure however often it is read; a context that ends during the
// wait ends it with the context's error.
func TestWaitForPlanCountsOnceAndHonoursTheContext(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	missing := t.TempDir() + "/not-mounted"
	s, err := NewDirSource(missing, DirOptions{Options: Options{
		Subscriber: func(Update) {}, Registerer: reg, WaitForPlan: 400 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Plans()) != 0 {
		t.Fatalf("Plans = %v", s.Plans())
	}
	want := `
# HELP backpressure_config_reloads_total Plan documents read from the config source, by result: success is a new valid plan for a gate, error a rejected document (the gate keeps its last good plan) or an unreadable source.
# TYPE backpressure_config_reloads_total counter
backpressure_config_reloads_total{result="error"} 1
backpressure_config_reloads_total{result="success"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_config_reloads_total"); err != nil {
		t.Error(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = NewConfigMapSource(ctx, fake.NewClientset(), "shop", "plans", Options{Subscriber: func(Update) {}, WaitForPlan: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("NewConfigMapSource with a context ending during the wait: %v, want DeadlineExceeded", err)
	}
}

// A ConfigMap created after the wait, read under the narrow Role a pod is
// given, is delivered by the informer.
func TestConfigMapSourceWaitForPlanThenFollows(t *testing.T) {
	admin, ns := testNamespace(t)
	client := restrictedClient(t, admin, ns, "app", "plans")
	rec := newRecorder()
	s, err := NewConfigMapSource(context.Background(), client, ns, "plans", Options{
		Subscriber: rec.subscribe, WaitForPlan: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Plans()) != 0 {
		t.Fatalf("Plans = %v, want none", s.Plans())
	}
	startSource(t, s.Start)
	if u := rec.next(t); len(u.Plans) != 0 {
		t.Fatalf("first update = %+v, want an empty one", u)
	}

	a := doc("a", 4)
	cm := configMap("plans", map[string]string{"a.json": encode(t, a)})
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := rec.waitFor(t, func(u Update) bool { return len(u.Plans) > 0 })
	if diff := cmp.Diff(map[string]plan.Document{"a": a}, u.Plans); diff != "" {
		t.Errorf("plans once the ConfigMap exists (-want +got):\n%s", diff)
	}
}

// An API server that accepts connections and never answers holds the first
// read back no longer than the wait: each request is bounded by it.
func TestConfigMapSourceWaitForPlanBoundsAHungAPIServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://" + ln.Addr().String()})

	const wait = 300 * time.Millisecond
	began := time.Now()
	s, err := NewConfigMapSource(context.Background(), client, "shop", "plans", Options{
		Subscriber: func(Update) {}, WaitForPlan: wait,
	})
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if took < wait || took > wait+5*time.Second {
		t.Errorf("NewConfigMapSource took %v with a %v wait against a server that never answers", took, wait)
	}
	if len(s.Plans()) != 0 {
		t.Errorf("Plans = %v, want none", s.Plans())
	}
}
