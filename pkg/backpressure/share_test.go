package backpressure_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

func TestRuntimeEnforcesItsOwnShare(t *testing.T) {
	d := sharetest.Divided(4, 1, map[string]int{"gateway-a": 6, "gateway-b": 0})
	tests := []struct {
		name    string
		pod     string // Options.PodName
		env     string // POD_NAME
		permits int
		queue   int
		workers int
		budget  float64
	}{
		{"named pod", "gateway-a", "", 6, 18, 3, 3},
		{"named pod with a zero share", "gateway-b", "", 0, 0, 0, 0},
		{"pod the document does not name", "gateway-new", "", 4, 8, 4, 2},
		{"name from POD_NAME", "", "gateway-a", 6, 18, 3, 3},
		{"PodName wins over POD_NAME", "gateway-b", "gateway-a", 0, 0, 0, 0},
		{"no name at all", "", "", 4, 8, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(reload.EnvPodName, tt.env)
			dir := t.TempDir()
			sharetest.WritePlan(t, dir, d)
			rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
				PodName:     tt.pod,
				Dispatchers: []string{"logistics-api"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := sharetest.MustGate(t, rt, "logistics-api").Limits(); got.Permits != tt.permits || got.QueueCapacity != tt.queue {
				t.Errorf("gate permits %d, queue %d; want %d, %d", got.Permits, got.QueueCapacity, tt.permits, tt.queue)
			}
			if got := sharetest.MustDispatcher(t, rt, "logistics-api").Stats().Limits; got != (dispatch.Limits{Workers: tt.workers, QueueCapacity: tt.queue}) {
				t.Errorf("dispatcher limits %+v, want %d workers", got, tt.workers)
			}
			// A zero rate is one token per second at least (see retry.Budget.SetRate).
			if got := sharetest.MustBudget(t, rt, "logistics-api").Stats().PerSecond; got != tt.budget {
				t.Errorf("retry budget %v/s, want %v", got, tt.budget)
			}
			got := sharetest.MustShare(t, rt, "logistics-api")
			if got.Limits.Permits != tt.permits || got.Revision != 1 || got.Hash != d.Hash {
				t.Errorf("Share = %+v, want this pod's view of the document", got)
			}
		})
	}
}

func TestRuntimeFollowsItsShareAcrossRevisions(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Divided(4, 1, map[string]int{"gateway-a": 6}))
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{PodName: "gateway-a", OnApplied: events.Hook})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	sharetest.Start(t, rt)

	// Another pod's share changes: a new revision, the same share for us.
	sharetest.WritePlan(t, dir, sharetest.Divided(4, 2, map[string]int{"gateway-a": 6, "gateway-b": 2}))
	x := events.Next(t)
	if x.Share.Limits.Permits != 6 || x.Share.Revision != 2 {
		t.Errorf("Applied = permits %d, revision %d; want 6, 2", x.Share.Limits.Permits, x.Share.Revision)
	}
	// Our entry goes away: the base share applies.
	sharetest.WritePlan(t, dir, sharetest.Divided(4, 3, map[string]int{"gateway-b": 2}))
	if x := events.Next(t); x.Share.Limits.Permits != 4 || x.Share.Revision != 3 {
		t.Errorf("Applied = permits %d, revision %d; want 4, 3", x.Share.Limits.Permits, x.Share.Revision)
	}
	if diff := cmp.Diff(backpressure.GateLimits(sharetest.Doc("logistics-api", 4)), sharetest.MustGate(t, rt, "logistics-api").Limits()); diff != "" {
		t.Errorf("gate limits (-want +got):\n%s", diff)
	}
}

// When Start's context ends, the gates close and Start waits for the calls
// in flight before it returns.
func TestStartClosesAndDrainsTheGates(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 3))
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := sharetest.MustGate(t, rt, "logistics-api")
	held, err := g.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Start(ctx) }()
	cancel()
	sharetest.Eventually(t, 5*time.Second, "the gate closes", func() bool {
		p, err := g.TryAcquire(context.Background())
		p.Release() // a no-op unless admitted before the gate closed
		return errors.Is(err, gate.ErrClosed)
	})
	select {
	case err := <-done:
		t.Fatalf("Start returned (%v) with a call in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	held.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return once the gate drained")
	}
}

func TestStartGivesUpOnAGateThatDoesNotDrain(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 3))
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 3))
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{DrainTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	held, err := sharetest.MustGate(t, rt, "payments").Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	err = rt.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), `gates ["payments"] still had calls in flight after 100ms; not released`) {
		t.Errorf("Start = %v, want an error naming payments", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Start took %v with a 100ms drain timeout", took)
	}
}
