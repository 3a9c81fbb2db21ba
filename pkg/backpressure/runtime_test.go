package backpressure_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

func TestRuntimeFollowsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates:     []string{"logistics-api"},
		OnApplied: events.Hook,
	})
	if err != nil {
		t.Fatal(err)
	}

	// The first plan is in force as soon as New returns.
	first := events.Next(t)
	if first.Share.Gate != "logistics-api" || first.Share != backpressure.ShareOf(sharetest.Doc("logistics-api", 2)) || first.At.IsZero() {
		t.Fatalf("first Applied = %+v", first)
	}
	g := sharetest.MustGate(t, rt, "logistics-api")
	if diff := cmp.Diff(backpressure.GateLimits(sharetest.Doc("logistics-api", 2)), g.Limits()); diff != "" {
		t.Fatalf("gate limits after New (-want +got):\n%s", diff)
	}
	if got := sharetest.MustBudget(t, rt, "logistics-api").Stats().PerSecond; got != 2 {
		t.Errorf("retry budget rate = %v, want 2", got)
	}
	if _, err := rt.Dispatcher("logistics-api"); err == nil {
		t.Error("a gate not listed in Options.Dispatchers has a dispatcher")
	}
	sharetest.Start(t, rt)
	// Start delivers the plans New already applied: nothing new to put in force.
	events.Quiet(t, 100*time.Millisecond)

	// Grow: the same gate object now admits five calls at once.
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 5))
	if x := events.Next(t); x.Share.Gate != "logistics-api" || x.Share.Limits.Permits != 5 {
		t.Fatalf("Applied after growing = %+v", x)
	}
	if sharetest.MustGate(t, rt, "logistics-api") != g {
		t.Fatal("the gate was replaced rather than resized")
	}
	var held [5]gate.Permit
	for i := range held {
		if held[i], err = g.TryAcquire(context.Background()); err != nil {
			t.Fatalf("permit %d of 5: %v", i+1, err)
		}
	}
	if p, err := g.TryAcquire(context.Background()); !errors.Is(err, gate.ErrQueueFull) {
		p.Release()
		t.Fatalf("sixth call: err = %v, want queue full", err)
	}

	// Shrink under load: nobody is pre-empted, nobody new gets in. The
	// smaller share comes with a newer revision, as the operator's does.
	shrunk := sharetest.WithRevision(sharetest.Doc("logistics-api", 1), 7)
	sharetest.WritePlan(t, dir, shrunk)
	if x := events.Next(t); x.Share.Limits.Permits != 1 {
		t.Fatalf("Applied after shrinking = %+v", x)
	}
	if st := g.Stats(); st.InFlight != 5 || st.Limits.Permits != 1 {
		t.Fatalf("after shrinking: in flight %d, permits %d; want 5 and 1", st.InFlight, st.Limits.Permits)
	}
	for i := range held {
		held[i].Release()
	}
	p, err := g.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("after every call ended: %v", err)
	}
	p.Release()
	if got := sharetest.MustShare(t, rt, "logistics-api"); got != backpressure.ShareOf(shrunk) {
		t.Errorf("Share = %+v, want the one on disk", got)
	}

	// A new gate appears with its document.
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 3))
	if x := events.Next(t); x.Share.Gate != "payments" || x.Share.Limits.Permits != 3 {
		t.Fatalf("Applied for the new gate = %+v", x)
	}
	if g, err := rt.Gate("payments"); err != nil || g.Limits().Permits != 3 {
		t.Fatal("no gate for the new document")
	}

	// A bad document keeps the last good plan.
	sharetest.WriteFile(t, dir, plan.KeyFor("logistics-api"), []byte(`{"version":1,"gate":"logistics-api","permits":-1}`))
	events.Quiet(t, 200*time.Millisecond)
	if got := g.Limits().Permits; got != 1 {
		t.Errorf("after a bad document: permits %d, want the last good 1", got)
	}

	// A newer quota generation with the same plan changes nothing.
	same := shrunk
	same.Generation = 7
	sharetest.WritePlan(t, dir, same)
	events.Quiet(t, 200*time.Millisecond)
	if got := sharetest.MustShare(t, rt, "logistics-api"); got != backpressure.ShareOf(shrunk) {
		t.Errorf("after a new generation of the same plan: Share = %+v, want the same plan", got)
	}

	// A document that disappears leaves its gate with the last plan.
	if err := os.Remove(filepath.Join(dir, plan.KeyFor("payments"))); err != nil {
		t.Fatal(err)
	}
	events.Quiet(t, 200*time.Millisecond)
	if g, err := rt.Gate("payments"); err != nil || g.Limits().Permits != 3 {
		t.Error("the gate of a removed document lost its plan")
	}
}

func TestNewFailsWithoutAPlanForANamedGate(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string
		opts        backpressure.Options
		missingDir  bool
		wantNoPlan  bool
		wantMessage string
	}{{
		name:       "empty directory",
		files:      map[string]string{},
		wantNoPlan: true,
	}, {
		name:        "only an invalid document",
		files:       map[string]string{"logistics-api.json": `{"version":1}`},
		opts:        backpressure.Options{Gates: []string{"logistics-api"}},
		wantNoPlan:  true,
		wantMessage: "unsupported version 1",
	}, {
		name:        "the named gate is not in the source",
		files:       map[string]string{"payments.json": sourcetest.Encode(t, sharetest.Doc("payments", 1))},
		opts:        backpressure.Options{Gates: []string{"logistics-api"}},
		wantNoPlan:  true,
		wantMessage: `gate "logistics-api"; the source holds plans for ["payments"]`,
	}, {
		name:        "a dispatcher names a gate that is not in the source",
		files:       map[string]string{"payments.json": sourcetest.Encode(t, sharetest.Doc("payments", 1))},
		opts:        backpressure.Options{Gates: []string{"payments"}, Dispatchers: []string{"search"}},
		wantNoPlan:  true,
		wantMessage: `gate "search"`,
	}, {
		name:        "no directory",
		missingDir:  true,
		wantMessage: "no such file or directory",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tt.files {
				sharetest.WriteFile(t, dir, name, []byte(data))
			}
			if tt.missingDir {
				dir = filepath.Join(dir, "absent")
			}
			events := sharetest.NewRecorder()
			tt.opts.OnApplied = events.Hook
			rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), tt.opts)
			if err == nil {
				t.Fatalf("New succeeded; runtime %v", rt)
			}
			if got := errors.Is(err, backpressure.ErrNoPlan); got != tt.wantNoPlan {
				t.Errorf("errors.Is(err, backpressure.ErrNoPlan) = %v, want %v; err: %v", got, tt.wantNoPlan, err)
			}
			if !strings.Contains(err.Error(), tt.wantMessage) || !strings.HasPrefix(err.Error(), "backpressure: ") {
				t.Errorf("err = %q, want it to start with %q and contain %q", err, "backpressure: ", tt.wantMessage)
			}
			events.Quiet(t, 0)
		})
	}
}

func TestRuntimeDispatchers(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("search", 2))
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 1))
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Dispatchers: []string{"search"},
		OnApplied:   events.Hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Dispatcher("payments"); err == nil {
		t.Error("payments has a dispatcher it did not ask for")
	}
	d := sharetest.MustDispatcher(t, rt, "search")
	if d == nil {
		t.Fatal("no dispatcher for search")
	}
	if diff := cmp.Diff(dispatch.Limits{Workers: 2, QueueCapacity: 4}, d.Stats().Limits); diff != "" {
		t.Errorf("dispatcher limits (-want +got):\n%s", diff)
	}
	sharetest.Start(t, rt)
	for range 2 {
		events.Next(t) // payments and search from New
	}

	sharetest.WritePlan(t, dir, sharetest.Doc("search", 6))
	if x := events.Next(t); x.Share.Gate != "search" {
		t.Fatalf("Applied = %+v", x)
	}
	if diff := cmp.Diff(dispatch.Limits{Workers: 6, QueueCapacity: 12}, d.Stats().Limits); diff != "" {
		t.Errorf("dispatcher limits after the reload (-want +got):\n%s", diff)
	}

	// Shutdown runs what was queued, then closes the gates.
	var mu sync.Mutex
	ran := 0
	for range 10 {
		if err := d.Submit(context.Background(), func(context.Context) {
			time.Sleep(time.Millisecond)
			mu.Lock()
			ran++
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 10 {
		t.Errorf("Shutdown returned after %d of 10 tasks", ran)
	}
	if _, err := sharetest.MustGate(t, rt, "payments").TryAcquire(context.Background()); !errors.Is(err, gate.ErrClosed) {
		t.Errorf("after Shutdown: err = %v, want closed", err)
	}
}

// The log line every plan produces is part of the contract of the example
// app, whose e2e harness parses it: keep it exact.
func TestAppliedPlanLogLine(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 4))
	var buf syncBuffer
	log := logr.FromSlogHandler(slog.NewJSONHandler(&buf, nil))
	before := time.Now()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	_ = rt

	var lines []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "Applied plan" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("got %d Applied plan lines, want 1; log:\n%s", len(lines), buf.String())
	}
	got := lines[0]
	stamp, err := time.Parse(time.RFC3339Nano, got["time"].(string))
	if err != nil || stamp.Before(before.Truncate(time.Microsecond)) || stamp.After(after) {
		t.Errorf("time %v is not between New's start %v and end %v (err %v)", got["time"], before, after, err)
	}
	delete(got, "time")
	want := map[string]any{"level": "INFO", "msg": "Applied plan", "gate": "logistics-api",
		"hash": sharetest.Doc("logistics-api", 4).Hash, "permits": float64(4)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Applied plan line (-want +got):\n%s", diff)
	}
}

func TestStartTwice(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 1))
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- rt.Start(ctx) }()
	}
	// Whichever call came second returns at once with an error.
	select {
	case err := <-errs:
		if err == nil {
			t.Error("a second Start returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Error("a second Start did not return")
	}
	cancel()
	if err := <-errs; err != nil {
		t.Errorf("the first Start: %v", err)
	}
}

// Accessors may run on any goroutine while reloads resize the gates.
func TestAccessorsDuringReloads(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 1))
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{OnApplied: events.Hook})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	sharetest.Start(t, rt)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if g, err := rt.Gate("logistics-api"); err == nil {
					if p, err := g.TryAcquire(context.Background()); err == nil {
						p.Release()
					}
				}
				d, _ := rt.Share("logistics-api")
				_ = d.Limits.Permits
				_, _ = rt.Gate("payments")
			}
		})
	}
	var seen []int
	for permits := 2; permits <= 6; permits++ {
		sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", permits))
		x := events.Next(t)
		seen = append(seen, x.Share.Limits.Permits)
	}
	close(stop)
	wg.Wait()
	if !slices.Equal(seen, []int{2, 3, 4, 5, 6}) {
		t.Errorf("applied permits %v, want 2..6 in order", seen)
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A name the Runtime has no gate for is an error matching ErrNoPlan from
// every lookup, never a nil gate that a middleware would meet later.
func TestLookupOfAnUnknownGateIsAnError(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{Gates: []string{"logistics-api"}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `backpressure: no valid plan document for gate "logistcs-api"; the Runtime has gates ["logistics-api"]`
	g, err := rt.Gate("logistcs-api")
	if g != nil || !errors.Is(err, backpressure.ErrNoPlan) || err.Error() != want {
		t.Errorf("Gate = %v, %v; want nil, %q", g, err, want)
	}
	if b, err := rt.Budget("logistcs-api"); b != nil || !errors.Is(err, backpressure.ErrNoPlan) {
		t.Errorf("Budget = %v, %v; want nil and ErrNoPlan", b, err)
	}
	if d, err := rt.Dispatcher("logistcs-api"); d != nil || !errors.Is(err, backpressure.ErrNoPlan) {
		t.Errorf("Dispatcher = %v, %v; want nil and ErrNoPlan", d, err)
	}
	if p, err := rt.Share("logistcs-api"); p != (backpressure.Share{}) || !errors.Is(err, backpressure.ErrNoPlan) {
		t.Errorf("Share = %+v, %v; want the zero Plan and ErrNoPlan", p, err)
	}
	// A gate without a dispatcher: a different mistake, named as such.
	d, err := rt.Dispatcher("logistics-api")
	if d != nil || err == nil || errors.Is(err, backpressure.ErrNoPlan) || !strings.Contains(err.Error(), "Options.Dispatchers") {
		t.Errorf("Dispatcher of a gate without one = %v, %v; want an error naming Options.Dispatchers", d, err)
	}
}

// The zero Source names no source: New says so instead of panicking.
func TestNewRejectsTheZeroSource(t *testing.T) {
	if _, err := backpressure.New(t.Context(), backpressure.Source{}, backpressure.Options{}); err == nil || !strings.Contains(err.Error(), "FromDir or FromConfigMap") {
		t.Errorf("New(Source{}) = %v; want an error naming FromDir and FromConfigMap", err)
	}
}
