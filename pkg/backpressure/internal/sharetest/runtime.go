package sharetest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// Recorder collects what Options.OnApplied reports.
type Recorder struct{ ch chan backpressure.Applied }

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{ch: make(chan backpressure.Applied, 100)} }

// Hook is the Options.OnApplied to give the Runtime.
func (r *Recorder) Hook(x backpressure.Applied) { r.ch <- x }

// Next waits for the next share put in force.
func (r *Recorder) Next(t testing.TB) backpressure.Applied {
	t.Helper()
	select {
	case x := <-r.ch:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("no plan applied within 5s")
		return backpressure.Applied{}
	}
}

// Quiet fails when a share is put in force within d.
func (r *Recorder) Quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case x := <-r.ch:
		t.Fatalf("unexpected plan applied: %s %s permits %d", x.Share.Gate, x.Share.Hash, x.Share.Limits.Permits)
	case <-time.After(d):
	}
}

// Start runs rt.Start until the test ends, and fails the test when it
// returns an error.
func Start(t testing.TB, rt *backpressure.Runtime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

// Eventually polls cond every few milliseconds until it holds or timeout
// passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// MustGate returns rt's gate name, failing the test when it has none.
func MustGate(t testing.TB, rt *backpressure.Runtime, name string) *gate.Gate {
	t.Helper()
	g, err := rt.Gate(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// MustBudget returns rt's retry budget of gate name.
func MustBudget(t testing.TB, rt *backpressure.Runtime, name string) *retry.Budget {
	t.Helper()
	b, err := rt.Budget(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MustDispatcher returns rt's dispatcher of gate name.
func MustDispatcher(t testing.TB, rt *backpressure.Runtime, name string) *dispatch.Dispatcher {
	t.Helper()
	d, err := rt.Dispatcher(name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// MustShare returns the share in force on rt's gate name.
func MustShare(t testing.TB, rt *backpressure.Runtime, name string) backpressure.Share {
	t.Helper()
	s, err := rt.Share(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// BootstrapGauge returns backpressure_config_gate_bootstrap for gate as reg
// exports it: "bootstrap", "published" or "absent".
func BootstrapGauge(t testing.TB, reg prometheus.Gatherer, gate string) string {
	t.Helper()
	v, ok := MetricValue(t, reg, "backpressure_config_gate_bootstrap", "gate", gate)
	switch {
	case !ok:
		return "absent"
	case v == 1:
		return "bootstrap"
	default:
		return "published"
	}
}

// MetricValue returns the value of the counter or gauge name as reg exports
// it, the series whose label is value (the first series when label is
// ""), and whether reg exports that series.
func MetricValue(t testing.TB, reg prometheus.Gatherer, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if !match {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
