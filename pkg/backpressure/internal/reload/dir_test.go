package reload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

func TestDirSourceFollowsKubeletUpdates(t *testing.T) {
	a1, a2, b1 := sourcetest.Doc("a", 1), sourcetest.Doc("a", 2), sourcetest.Doc("b", 1)
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, a1), "b.json": sourcetest.Encode(t, b1)})
	rec := sourcetest.NewRecorder[Update]()
	reg := prometheus.NewPedanticRegistry()
	logs := &sourcetest.LogSink{}
	// A poll interval far beyond the test: only fsnotify can deliver.
	s, err := NewDirSource(vol.Dir, DirOptions{
		Options:      Options{Subscriber: rec.Subscribe, Registerer: reg, Logger: logs.Logger()},
		PollInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]plan.Document{"a": a1, "b": b1}, s.Plans()); diff != "" {
		t.Fatalf("Plans before Start (-want +got):\n%s", diff)
	}

	// Readers of Plans race with every update below.
	stopReaders := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stopReaders:
				return
			default:
				if len(s.Plans()) < 2 {
					t.Error("Plans lost a gate")
					return
				}
			}
		}
	})
	defer func() { close(stopReaders); readers.Wait() }()

	sourcetest.Start(t, s.Start)
	first := rec.Next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a1, "b": b1}, Changed: []string{"a", "b"}}, first); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}

	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a2), "b.json": sourcetest.Encode(t, b1)})
	u := rec.Next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Changed: []string{"a"}}, u); diff != "" {
		t.Fatalf("after the swap (-want +got):\n%s", diff)
	}

	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a2)})
	u = rec.Next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Orphaned: []string{"b"}}, u); diff != "" {
		t.Fatalf("after b was removed (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(s.tracker.metrics.orphaned.WithLabelValues("b")); got != 1 {
		t.Errorf("orphaned{b} = %v, want 1", got)
	}

	// A bad document keeps the last good plan and is counted once.
	vol.Write(map[string]string{"a.json": `{"version": 2}`})
	sourcetest.WaitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) == 1 })
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("a bad document replaced the plan: %+v", got)
	}
	vol.Write(map[string]string{"a.json": `{"version": 2}`}) // same bad bytes, new swap
	rec.Quiet(t, 300*time.Millisecond)
	if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("reloads{error} = %v after the same bad document twice, want 1", got)
	}
	if got := logs.Count("Rejected plan document"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1:\n%s", got, logs)
	}

	// A writer other than the kubelet, writing a file in place, is seen too.
	if err := os.WriteFile(filepath.Join(vol.Dir, "c.json"), []byte(sourcetest.Encode(t, sourcetest.Doc("c", 4))), 0o644); err != nil {
		t.Fatal(err)
	}
	u = rec.WaitFor(t, func(u Update) bool { return slices0(u.Changed) == "c" })
	if !plan.Equal(u.Plans["c"], sourcetest.Doc("c", 4)) {
		t.Errorf("c = %+v", u.Plans["c"])
	}
}

// slices0 returns the only element of s, or "" when s has not exactly one.
func slices0(s []string) string {
	if len(s) != 1 {
		return ""
	}
	return s[0]
}

func TestDirSourcePollBackstop(t *testing.T) {
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 1))})
	rec := sourcetest.NewRecorder[Update]()
	logs := &sourcetest.LogSink{}
	s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{Subscriber: rec.Subscribe, Logger: logs.Logger()}})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	started := make(chan struct{})
	s.tick, s.noWatch, s.started = tick, true, started
	sourcetest.Start(t, s.Start)
	rec.Next(t)
	// Start reads the volume once more before it polls: a write before
	// that read is done would be read without a poll.
	<-started

	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 7))})
	rec.Quiet(t, 200*time.Millisecond) // no watch, no tick: nothing yet
	tick <- time.Now()
	if u := rec.Next(t); u.Plans["a"].Permits != 7 {
		t.Fatalf("after a poll: %+v", u)
	}

	// Polling the same bad document again and again logs and counts it once.
	vol.Write(map[string]string{"a.json": `{"version": 1, "gate": "a"}`})
	for range 5 {
		tick <- time.Now()
	}
	tick <- time.Now() // the fifth poll has finished once this send is taken
	if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("reloads{error} = %v after 6 polls of one bad document, want 1", got)
	}
	if got := logs.Count("Rejected plan document"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1", got)
	}
	if got := s.Plans()["a"].Permits; got != 7 {
		t.Errorf("permits = %d, want the last good 7", got)
	}
}

func TestDirSourceWatchesAgainAfterTheDirectoryIsReplaced(t *testing.T) {
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 1))})
	rec := sourcetest.NewRecorder[Update]()
	s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{Subscriber: rec.Subscribe}})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	s.tick = tick
	sourcetest.Start(t, s.Start)
	rec.Next(t)

	if err := os.RemoveAll(vol.Dir); err != nil {
		t.Fatal(err)
	}
	sourcetest.WaitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) >= 1 })
	if got := s.Plans()["a"].Permits; got != 1 {
		t.Errorf("an unreadable directory dropped the plan: permits %d", got)
	}

	if err := os.Mkdir(vol.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol.Forget()
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 2))})
	tick <- time.Now() // re-adds the watch if it is not back yet, and reads
	rec.WaitFor(t, func(u Update) bool { return u.Plans["a"].Permits == 2 })

	// From now on, no tick: only the renewed watch can deliver.
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 3))})
	rec.WaitFor(t, func(u Update) bool { return u.Plans["a"].Permits == 3 })
}

func TestNewDirSourceFailsFast(t *testing.T) {
	good := sourcetest.Encode(t, sourcetest.Doc("a", 1))
	tests := []struct {
		name    string
		files   map[string]string // nil: the directory does not exist
		wantErr func(error) bool
		wantIn  string
	}{
		{"missing directory", nil, func(err error) bool { return errors.Is(err, fs.ErrNotExist) }, "no such file"},
		{"empty directory", map[string]string{}, func(err error) bool { return errors.Is(err, ErrNoPlan) }, "<gate>.json"},
		{"no plan files", map[string]string{"README": "x"}, func(err error) bool { return errors.Is(err, ErrNoPlan) }, "<gate>.json"},
		{"only a bad plan", map[string]string{"a.json": strings.Replace(good, `"permits":1`, `"permits":-1`, 1)},
			func(err error) bool {
				var fe *plan.FieldError
				return errors.Is(err, ErrNoPlan) && errors.As(err, &fe) && fe.Field == "permits"
			}, "permits: must be in [0, 1048575], got -1"},
		{"unknown version", map[string]string{"a.json": `{"version":9}`},
			func(err error) bool { return errors.Is(err, plan.ErrUnsupportedVersion) }, "unsupported version 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "plans")
			if tt.files != nil {
				dir = sourcetest.NewVolume(t, tt.files).Dir
			}
			s, err := NewDirSource(dir, DirOptions{Options: Options{Subscriber: func(Update) {}}})
			if err == nil {
				t.Fatalf("NewDirSource succeeded with plans %v", s.Plans())
			}
			if !tt.wantErr(err) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q: wrong kind or does not contain %q", err, tt.wantIn)
			}
		})
	}

	t.Run("a bad plan beside a good one", func(t *testing.T) {
		vol := sourcetest.NewVolume(t, map[string]string{"a.json": good, "b.json": "{"})
		reg := prometheus.NewPedanticRegistry()
		s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{Subscriber: func(Update) {}, Registerer: reg}})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"a"}, slices.Sorted(maps.Keys(s.Plans()))); diff != "" {
			t.Errorf("gates (-want +got):\n%s", diff)
		}
		if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
			t.Errorf("reloads{error} = %v, want 1", got)
		}
	})

	t.Run("no subscriber", func(t *testing.T) {
		vol := sourcetest.NewVolume(t, map[string]string{"a.json": good})
		if _, err := NewDirSource(vol.Dir, DirOptions{}); err == nil {
			t.Error("NewDirSource accepted options without a subscriber")
		}
	})
}

func TestDirSourceStartTwice(t *testing.T) {
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 1))})
	rec := sourcetest.NewRecorder[Update]()
	s, err := NewDirSource(vol.Dir, DirOptions{Options: Options{Subscriber: rec.Subscribe}})
	if err != nil {
		t.Fatal(err)
	}
	stop := sourcetest.Start(t, s.Start)
	rec.Next(t)
	if err := s.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	stop()
	if n := rec.Count(); n != 1 {
		t.Errorf("%d deliveries, want 1", n)
	}
}

func TestReadDirLimitsFileSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.json"), make([]byte, maxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "b.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	snap, err := readDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e := snap["a.json"]; !strings.Contains(e.readErr, "larger than") {
		t.Errorf("a.json: %+v", e.readErr)
	}
	if e := snap["b.json"]; e.readErr == "" {
		t.Error("b.json, a directory, read without error")
	}
}

// A pod whose operator is rolled back (or not yet upgraded) meets version 1
// documents: they are rejected, counted and logged, and the gate keeps
// enforcing its last version 2 plan.
func TestVersion1DocumentKeepsTheLastPlan(t *testing.T) {
	a2 := sourcetest.Doc("a", 2)
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, a2)})
	rec := sourcetest.NewRecorder[Update]()
	reg := prometheus.NewPedanticRegistry()
	logs := &sourcetest.LogSink{}
	s, err := NewDirSource(vol.Dir, DirOptions{
		Options:      Options{Subscriber: rec.Subscribe, Registerer: reg, Logger: logs.Logger()},
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Start(t, s.Start)
	rec.Next(t)

	vol.Write(map[string]string{"a.json": sourcetest.Version1Doc})
	sourcetest.WaitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) == 1 })
	rec.Quiet(t, 300*time.Millisecond) // nothing new to enforce
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("the version 1 document replaced the plan: %+v", got)
	}
	if got := logs.Count(`"msg"="Rejected plan document; the gate keeps its last good plan" "error"="reload: a.json: plan: version: unsupported version 1; this reader understands versions 2 and 3"`); got != 1 {
		t.Errorf("the rejection was not logged once with its reason:\n%s", logs)
	}
	if got := logs.Count(`"keptHash"="` + a2.Hash + `"`); got != 1 {
		t.Errorf("the log does not name the plan kept:\n%s", logs)
	}
	if got := testutil.ToFloat64(s.tracker.metrics.planInfo.WithLabelValues("a", a2.Hash)); got != 1 {
		t.Errorf("plan_info for the kept plan = %v, want 1", got)
	}

	// The next version 2 document is taken as usual.
	a3 := sourcetest.Doc("a", 3)
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a3)})
	rec.WaitFor(t, func(u Update) bool { return plan.Equal(u.Plans["a"], a3) })
}

// A gate whose present document is rejected says so in
// backpressure_config_gate_rejected until a valid document replaces it, and
// keeps its last good plan meanwhile; the other gates read 0.
func TestDirSourceReportsARejectedDocumentUntilAValidOne(t *testing.T) {
	a1, b1 := sourcetest.Doc("a", 1), sourcetest.Doc("b", 1)
	vol := sourcetest.NewVolume(t, map[string]string{"a.json": sourcetest.Encode(t, a1), "b.json": sourcetest.Encode(t, b1)})
	rec := sourcetest.NewRecorder[Update]()
	reg := prometheus.NewPedanticRegistry()
	s, err := NewDirSource(vol.Dir, DirOptions{
		Options:      Options{Subscriber: rec.Subscribe, Registerer: reg},
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Start(t, s.Start)
	rec.Next(t)
	rejected := func(a, b int) string {
		return fmt.Sprintf(`
# HELP backpressure_config_gate_rejected 1 while the gate's latest document in the config source is rejected and the gate keeps its last good plan (or, without one, has none), 0 once a valid document replaces it.
# TYPE backpressure_config_gate_rejected gauge
backpressure_config_gate_rejected{gate="a"} %d
backpressure_config_gate_rejected{gate="b"} %d
`, a, b)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected(0, 0)), "backpressure_config_gate_rejected"); err != nil {
		t.Errorf("at start: %v", err)
	}

	// Out of range: more workers than permits.
	bad := a1
	bad.Workers = 50
	bad.Hash = plan.Hash(bad)
	badJSON, err := json.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	vol.Write(map[string]string{"a.json": string(badJSON), "b.json": sourcetest.Encode(t, b1)})
	sourcetest.WaitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.rejected.WithLabelValues("a")) == 1 })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected(1, 0)), "backpressure_config_gate_rejected"); err != nil {
		t.Errorf("after a bad document: %v", err)
	}
	rec.Quiet(t, 300*time.Millisecond) // nothing new to enforce
	if got := s.Plans()["a"]; !plan.Equal(got, a1) {
		t.Errorf("the rejected document replaced the plan: %+v", got)
	}

	// Read again and again, the same bad document keeps the gauge at 1.
	time.Sleep(200 * time.Millisecond) // four polls
	if got := testutil.ToFloat64(s.tracker.metrics.rejected.WithLabelValues("a")); got != 1 {
		t.Errorf("after more polls of the same bad document: gauge %v, want 1", got)
	}

	a2 := sourcetest.Doc("a", 2)
	vol.Write(map[string]string{"a.json": sourcetest.Encode(t, a2), "b.json": sourcetest.Encode(t, b1)})
	rec.WaitFor(t, func(u Update) bool { return plan.Equal(u.Plans["a"], a2) })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected(0, 0)), "backpressure_config_gate_rejected"); err != nil {
		t.Errorf("after a valid document: %v", err)
	}
}
