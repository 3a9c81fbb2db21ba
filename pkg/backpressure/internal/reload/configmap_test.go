package reload

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// startSource starts s and returns a function that stops it and checks
// that Start returned nil promptly.
func startSource(t *testing.T, start func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Start did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

func updateConfigMap(t *testing.T, client kubernetes.Interface, ns, name string, data map[string]string) {
	t.Helper()
	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = data
	if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestConfigMapSourceUnderANarrowRole(t *testing.T) {
	admin, ns := testNamespace(t)
	ctx := context.Background()
	const name = "search-gateway-backpressure"
	a1, a2, b1 := doc("a", 1), doc("a", 2), doc("b", 1)
	for _, cm := range []string{name, "unrelated"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx,
			configMap(cm, map[string]string{"a.json": encode(t, a1), "b.json": encode(t, b1)}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client := restrictedClient(t, admin, ns, "search-gateway", name)

	// The role is as narrow as promised: other ConfigMaps and unfiltered
	// lists are forbidden.
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "unrelated", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get of another ConfigMap: %v, want forbidden", err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("unfiltered list: %v, want forbidden", err)
	}
	if _, err := NewConfigMapSource(ctx, client, ns, "unrelated", Options{Subscriber: func(Update) {}}); !apierrors.IsForbidden(err) {
		t.Fatalf("a source on a ConfigMap outside the role: %v, want forbidden", err)
	}

	rec := newRecorder()
	reg := prometheus.NewPedanticRegistry()
	logs := &logSink{}
	s, err := NewConfigMapSource(ctx, client, ns, name, Options{Subscriber: rec.subscribe, Registerer: reg, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	startSource(t, s.Start)
	first := rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a1, "b": b1}, Changed: []string{"a", "b"}}, first); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}

	updateConfigMap(t, admin, ns, name, map[string]string{"a.json": encode(t, a2), "b.json": encode(t, b1)})
	u := rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Changed: []string{"a"}}, u); diff != "" {
		t.Fatalf("after an update (-want +got):\n%s", diff)
	}

	// The unrelated ConfigMap is outside the watch.
	updateConfigMap(t, admin, ns, "unrelated", map[string]string{"a.json": encode(t, doc("a", 40))})

	// A bad document is rejected once and the gate keeps its plan.
	bad := strings.Replace(encode(t, a2), `"ratePerSecond":0`, `"ratePerSecond":-1`, 1)
	updateConfigMap(t, admin, ns, name, map[string]string{"a.json": bad, "b.json": encode(t, b1)})
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) == 1 })
	// An unrelated edit of the ConfigMap reads the same bad bytes again.
	updateConfigMap(t, admin, ns, name, map[string]string{"a.json": bad, "b.json": encode(t, b1), "notes": "x"})
	rec.quiet(t, 300*time.Millisecond)
	if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("reloads{error} = %v, want 1", got)
	}
	if got := logs.count("ratePerSecond: must be a number in [0, 1000000000], got -1"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1:\n%s", got, logs)
	}
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("plan after a bad document: %+v", got)
	}

	// A removed key orphans its gate; a deleted ConfigMap orphans all.
	updateConfigMap(t, admin, ns, name, map[string]string{"b.json": encode(t, b1)})
	u = rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Orphaned: []string{"a"}}, u); diff != "" {
		t.Fatalf("after a was removed (-want +got):\n%s", diff)
	}
	if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u = rec.next(t)
	if diff := cmp.Diff([]string{"a", "b"}, u.Orphaned); diff != "" {
		t.Fatalf("orphans after the ConfigMap was deleted (-want +got):\n%s", diff)
	}
	if len(u.Plans) != 2 {
		t.Errorf("plans after deletion: %v", u.Plans)
	}

	// Created again, it is followed again.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name, map[string]string{"b.json": encode(t, doc("b", 9))}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u = rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": doc("b", 9)}, Changed: []string{"b"}, Orphaned: []string{"a"}}, u); diff != "" {
		t.Fatalf("after the ConfigMap came back (-want +got):\n%s", diff)
	}
	want := `
# HELP backpressure_config_gate_orphaned 1 when the gate's document has disappeared from the config source and the gate keeps its last plan until the process restarts, else 0.
# TYPE backpressure_config_gate_orphaned gauge
backpressure_config_gate_orphaned{gate="a"} 1
backpressure_config_gate_orphaned{gate="b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_config_gate_orphaned"); err != nil {
		t.Error(err)
	}
}

func TestNewConfigMapSourceFailsFast(t *testing.T) {
	admin, ns := testNamespace(t)
	ctx := context.Background()
	opts := Options{Subscriber: func(Update) {}}

	if _, err := NewConfigMapSource(ctx, admin, ns, "missing", opts); !apierrors.IsNotFound(err) {
		t.Errorf("missing ConfigMap: %v, want not found", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("empty", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewConfigMapSource(ctx, admin, ns, "empty", opts); !errors.Is(err, ErrNoPlan) {
		t.Errorf("empty ConfigMap: %v, want ErrNoPlan", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, configMap("v1", map[string]string{"a.json": version1Doc}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := NewConfigMapSource(ctx, admin, ns, "v1", opts)
	if !errors.Is(err, ErrNoPlan) || !errors.Is(err, plan.ErrUnsupportedVersion) {
		t.Errorf("version 1 only: %v, want ErrNoPlan and ErrUnsupportedVersion", err)
	}
	if _, err := NewConfigMapSource(ctx, nil, ns, "v1", opts); err == nil {
		t.Error("a nil client was accepted")
	}
}
