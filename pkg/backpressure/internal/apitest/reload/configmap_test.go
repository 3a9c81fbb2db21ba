package reload_test

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

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

func TestConfigMapSourceUnderANarrowRole(t *testing.T) {
	admin, ns := testNamespace(t)
	ctx := context.Background()
	const name = "search-gateway-backpressure"
	a1, a2, b1 := sourcetest.Doc("a", 1), sourcetest.Doc("a", 2), sourcetest.Doc("b", 1)
	for _, cm := range []string{name, "unrelated"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx,
			sourcetest.ConfigMap(cm, map[string]string{"a.json": sourcetest.Encode(t, a1), "b.json": sourcetest.Encode(t, b1)}), metav1.CreateOptions{}); err != nil {
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
	if _, err := reload.NewConfigMapSource(ctx, client, ns, "unrelated", reload.Options{Subscriber: func(reload.Update) {}}); !apierrors.IsForbidden(err) {
		t.Fatalf("a source on a ConfigMap outside the role: %v, want forbidden", err)
	}

	rec := sourcetest.NewRecorder[reload.Update]()
	reg := prometheus.NewPedanticRegistry()
	logs := &sourcetest.LogSink{}
	s, err := reload.NewConfigMapSource(ctx, client, ns, name, reload.Options{Subscriber: rec.Subscribe, Registerer: reg, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Start(t, s.Start)
	first := rec.Next(t)
	if diff := cmp.Diff(reload.Update{Plans: map[string]plan.Document{"a": a1, "b": b1}, Changed: []string{"a", "b"}}, first); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}

	sourcetest.UpdateConfigMap(t, admin, ns, name, map[string]string{"a.json": sourcetest.Encode(t, a2), "b.json": sourcetest.Encode(t, b1)})
	u := rec.Next(t)
	if diff := cmp.Diff(reload.Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Changed: []string{"a"}}, u); diff != "" {
		t.Fatalf("after an update (-want +got):\n%s", diff)
	}

	// The unrelated ConfigMap is outside the watch.
	sourcetest.UpdateConfigMap(t, admin, ns, "unrelated", map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 40))})

	// A bad document is rejected once and the gate keeps its plan.
	bad := strings.Replace(sourcetest.Encode(t, a2), `"ratePerSecond":0`, `"ratePerSecond":-1`, 1)
	sourcetest.UpdateConfigMap(t, admin, ns, name, map[string]string{"a.json": bad, "b.json": sourcetest.Encode(t, b1)})
	sourcetest.WaitUntil(t, func() bool { return errorCount(t, reg, reloadCounter) == 1 })
	// An unrelated edit of the ConfigMap reads the same bad bytes again.
	sourcetest.UpdateConfigMap(t, admin, ns, name, map[string]string{"a.json": bad, "b.json": sourcetest.Encode(t, b1), "notes": "x"})
	rec.Quiet(t, 300*time.Millisecond)
	if got := errorCount(t, reg, reloadCounter); got != 1 {
		t.Errorf("reloads{error} = %v, want 1", got)
	}
	if got := logs.Count("ratePerSecond: must be a number in [0, 1000000000], got -1"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1:\n%s", got, logs)
	}
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("plan after a bad document: %+v", got)
	}

	// A removed key orphans its gate; a deleted ConfigMap orphans all.
	sourcetest.UpdateConfigMap(t, admin, ns, name, map[string]string{"b.json": sourcetest.Encode(t, b1)})
	u = rec.Next(t)
	if diff := cmp.Diff(reload.Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Orphaned: []string{"a"}}, u); diff != "" {
		t.Fatalf("after a was removed (-want +got):\n%s", diff)
	}
	if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u = rec.Next(t)
	if diff := cmp.Diff([]string{"a", "b"}, u.Orphaned); diff != "" {
		t.Fatalf("orphans after the ConfigMap was deleted (-want +got):\n%s", diff)
	}
	if len(u.Plans) != 2 {
		t.Errorf("plans after deletion: %v", u.Plans)
	}

	// Created again, it is followed again.
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap(name, map[string]string{"b.json": sourcetest.Encode(t, sourcetest.Doc("b", 9))}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u = rec.Next(t)
	if diff := cmp.Diff(reload.Update{Plans: map[string]plan.Document{"a": a2, "b": sourcetest.Doc("b", 9)}, Changed: []string{"b"}, Orphaned: []string{"a"}}, u); diff != "" {
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
	opts := reload.Options{Subscriber: func(reload.Update) {}}

	if _, err := reload.NewConfigMapSource(ctx, admin, ns, "missing", opts); !apierrors.IsNotFound(err) {
		t.Errorf("missing ConfigMap: %v, want not found", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap("empty", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reload.NewConfigMapSource(ctx, admin, ns, "empty", opts); !errors.Is(err, reload.ErrNoPlan) {
		t.Errorf("empty ConfigMap: %v, want reload.ErrNoPlan", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap("v1", map[string]string{"a.json": sourcetest.Version1Doc}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := reload.NewConfigMapSource(ctx, admin, ns, "v1", opts)
	if !errors.Is(err, reload.ErrNoPlan) || !errors.Is(err, plan.ErrUnsupportedVersion) {
		t.Errorf("version 1 only: %v, want reload.ErrNoPlan and ErrUnsupportedVersion", err)
	}
	if _, err := reload.NewConfigMapSource(ctx, nil, ns, "v1", opts); err == nil {
		t.Error("a nil client was accepted")
	}
}
