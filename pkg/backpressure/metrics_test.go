package backpressure_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

func TestMetricsOnAPedanticRegistry(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	reg := prometheus.NewPedanticRegistry()
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"logistics-api"}, Dispatchers: []string{"logistics-api"},
		Registerer: reg, OnApplied: events.Hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	sharetest.Start(t, rt)
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 7))
	events.Next(t)

	want := `
# HELP backpressure_gate_permits Permits (in-flight limit) of the gate in force.
# TYPE backpressure_gate_permits gauge
backpressure_gate_permits{gate="logistics-api"} 7
# HELP backpressure_dispatcher_workers Workers the dispatcher is configured with.
# TYPE backpressure_dispatcher_workers gauge
backpressure_dispatcher_workers{dispatcher="logistics-api"} 7
# HELP backpressure_config_plan_info The plan in force for each gate: 1 for the gate's current plan hash.
# TYPE backpressure_config_plan_info gauge
backpressure_config_plan_info{gate="logistics-api",hash="` + sharetest.Doc("logistics-api", 7).Hash + `"} 1
# HELP backpressure_config_reloads_total Plan documents read from the config source, by result: success is a new valid plan for a gate, error a rejected document (the gate keeps its last good plan) or an unreadable source.
# TYPE backpressure_config_reloads_total counter
backpressure_config_reloads_total{result="error"} 0
backpressure_config_reloads_total{result="success"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"backpressure_gate_permits", "backpressure_dispatcher_workers",
		"backpressure_config_plan_info", "backpressure_config_reloads_total"); err != nil {
		t.Error(err)
	}
	// Every family the package documents is there, and the pedantic
	// registry accepts all of them.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{
		"backpressure_gate_in_flight", "backpressure_gate_queue_depth", "backpressure_gate_queue_wait_seconds",
		"backpressure_gate_admitted_total", "backpressure_gate_rejected_total",
		"backpressure_retry_attempts_total", "backpressure_retry_budget_exhausted_total",
		"backpressure_dispatcher_active_workers", "backpressure_dispatcher_queue_depth",
		"backpressure_dispatcher_rejected_total",
	} {
		if !got[name] {
			t.Errorf("%s is not exported", name)
		}
	}
}

// Two Runtimes (say, two ConfigMaps) may share a registry; a gate name both
// claim fails the second New and leaves the first one's series alone.
func TestRuntimesShareARegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	dirA, dirB := t.TempDir(), t.TempDir()
	sharetest.WritePlan(t, dirA, sharetest.Doc("payments", 1))
	sharetest.WritePlan(t, dirB, sharetest.Doc("search", 3))
	if _, err := backpressure.New(t.Context(), backpressure.FromDir(dirA), backpressure.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := backpressure.New(t.Context(), backpressure.FromDir(dirB), backpressure.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	// A third claims "search" again, after "logistics-api" (made first, in
	// name order): it fails and withdraws "logistics-api".
	dirC := t.TempDir()
	sharetest.WritePlan(t, dirC, sharetest.Doc("logistics-api", 9))
	sharetest.WritePlan(t, dirC, sharetest.Doc("search", 4))
	if _, err := backpressure.New(t.Context(), backpressure.FromDir(dirC), backpressure.Options{Registerer: reg}); err == nil ||
		!strings.Contains(err.Error(), `"search" is already collected`) {
		t.Fatalf("New with a gate name already collected: err = %v", err)
	}
	want := `
# HELP backpressure_gate_permits Permits (in-flight limit) of the gate in force.
# TYPE backpressure_gate_permits gauge
backpressure_gate_permits{gate="payments"} 1
backpressure_gate_permits{gate="search"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_gate_permits"); err != nil {
		t.Error(err)
	}
}

func TestNilRegistererRegistersNothing(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	if _, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{}); err != nil {
		t.Fatal(err)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "backpressure_") {
			t.Errorf("%s is in the global registry", mf.GetName())
		}
	}
}
