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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

// With WaitForPlan, a volume that stays empty (an optional ConfigMap that
// does not exist yet) yields an empty source once the wait has passed, and
// the kubelet's later update is delivered by fsnotify.
func TestDirSourceWaitForPlanThenFollows(t *testing.T) {
	vol := sourcetest.NewVolume(t, nil)
	rec := sourcetest.NewRecorder[Update]()
	logs := &sourcetest.LogSink{}
	const wait = 300 * time.Millisecond
	began := time.Now()
	s, err := NewDirSource(vol.Dir, DirOptions{
		Options:      Options{Subscriber: rec.Subscribe, Logger: logs.Logger(), WaitForPlan: wait},
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
	if logs.Count("No valid plan within the wait") != 1 {
		t.Errorf("the empty start is not logged once:\n%s", logs)
	}

	sourcetest.Start(t, s.Start)
	if u := rec.Next(t); len(u.Plans) != 0 || len(u.Changed) != 0 {
		t.Fatalf("first update = %+v, want an empty one", u)
	}
	a := sourcetest.Doc("a", 3)
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a)})
	u := rec.Next(t)
	if diff := cmp.Diff(map[string]plan.Document{"a": a}, u.Plans); diff != "" || !cmp.Equal(u.Changed, []string{"a"}) {
		t.Errorf("update after the volume was filled: changed %v, plans (-want +got):\n%s", u.Changed, diff)
	}
}

// A plan that appears during the wait ends it at once.
func TestDirSourceWaitForPlanEndsWhenAPlanAppears(t *testing.T) {
	vol := sourcetest.NewVolume(t, nil)
	a := sourcetest.Doc("a", 2)
	go func() {
		time.Sleep(100 * time.Millisecond)
		vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a)})
	}()
	began := time.Now()
	s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{Subscriber: func(Update) {}, WaitForPlan: time.Minute}})
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
