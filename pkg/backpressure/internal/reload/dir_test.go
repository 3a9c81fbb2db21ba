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
)

const eventWait = 5 * time.Second

// startDir starts s and returns a function that stops it and checks that
// Start returned nil promptly.
func startDir(t *testing.T, s *DirSource) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start returned %v", err)
				}
			case <-time.After(eventWait):
				t.Error("Start did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func TestDirSourceFollowsKubeletUpdates(t *testing.T) {
	a1, a2, b1 := doc("a", 1), doc("a", 2), doc("b", 1)
	vol := newVolume(t, map[string]string{"a.json": encode(t, a1), "b.json": encode(t, b1)})
	rec := newRecorder()
	reg := prometheus.NewPedanticRegistry()
	logs := &logSink{}
	// A poll interval far beyond the test: only fsnotify can deliver.
	s, err := NewDirSource(vol.dir, DirOptions{
		Options:      Options{Subscriber: rec.subscribe, Registerer: reg, Logger: logs.logger()},
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

	startDir(t, s)
	first := rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a1, "b": b1}, Changed: []string{"a", "b"}}, first); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}

	vol.write(map[string]string{"a.json": encode(t, a2), "b.json": encode(t, b1)})
	u := rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Changed: []string{"a"}}, u); diff != "" {
		t.Fatalf("after the swap (-want +got):\n%s", diff)
	}

	vol.write(map[string]string{"a.json": encode(t, a2)})
	u = rec.next(t)
	if diff := cmp.Diff(Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Orphaned: []string{"b"}}, u); diff != "" {
		t.Fatalf("after b was removed (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(s.tracker.metrics.orphaned.WithLabelValues("b")); got != 1 {
		t.Errorf("orphaned{b} = %v, want 1", got)
	}

	// A bad document keeps the last good plan and is counted once.
	vol.write(map[string]string{"a.json": `{"version": 2}`})
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) == 1 })
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("a bad document replaced the plan: %+v", got)
	}
	vol.write(map[string]string{"a.json": `{"version": 2}`}) // same bad bytes, new swap
	rec.quiet(t, 300*time.Millisecond)
	if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("reloads{error} = %v after the same bad document twice, want 1", got)
	}
	if got := logs.count("Rejected plan document"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1:\n%s", got, logs)
	}

	// A writer other than the kubelet, writing a file in place, is seen too.
	if err := os.WriteFile(filepath.Join(vol.dir, "c.json"), []byte(encode(t, doc("c", 4))), 0o644); err != nil {
		t.Fatal(err)
	}
	u = rec.waitFor(t, func(u Update) bool { return slices0(u.Changed) == "c" })
	if !plan.Equal(u.Plans["c"], doc("c", 4)) {
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

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(eventWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDirSourcePollBackstop(t *testing.T) {
	vol := newVolume(t, map[string]string{"a.json": encode(t, doc("a", 1))})
	rec := newRecorder()
	logs := &logSink{}
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{Subscriber: rec.subscribe, Logger: logs.logger()}})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	started := make(chan struct{})
	s.tick, s.noWatch, s.started = tick, true, started
	startDir(t, s)
	rec.next(t)
	// Start reads the volume once more before it polls: a write before
	// that read is done would be read without a poll.
	<-started

	vol.write(map[string]string{"a.json": encode(t, doc("a", 7))})
	rec.quiet(t, 200*time.Millisecond) // no watch, no tick: nothing yet
	tick <- time.Now()
	if u := rec.next(t); u.Plans["a"].Permits != 7 {
		t.Fatalf("after a poll: %+v", u)
	}

	// Polling the same bad document again and again logs and counts it once.
	vol.write(map[string]string{"a.json": `{"version": 1, "gate": "a"}`})
	for range 5 {
		tick <- time.Now()
	}
	tick <- time.Now() // the fifth poll has finished once this send is taken
	if got := testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("reloads{error} = %v after 6 polls of one bad document, want 1", got)
	}
	if got := logs.count("Rejected plan document"); got != 1 {
		t.Errorf("logged the rejection %d times, want 1", got)
	}
	if got := s.Plans()["a"].Permits; got != 7 {
		t.Errorf("permits = %d, want the last good 7", got)
	}
}

func TestDirSourceWatchesAgainAfterTheDirectoryIsReplaced(t *testing.T) {
	vol := newVolume(t, map[string]string{"a.json": encode(t, doc("a", 1))})
	rec := newRecorder()
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{Subscriber: rec.subscribe}})
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	s.tick = tick
	startDir(t, s)
	rec.next(t)

	if err := os.RemoveAll(vol.dir); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) >= 1 })
	if got := s.Plans()["a"].Permits; got != 1 {
		t.Errorf("an unreadable directory dropped the plan: permits %d", got)
	}

	if err := os.Mkdir(vol.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vol.cur, vol.keys = "", nil
	vol.write(map[string]string{"a.json": encode(t, doc("a", 2))})
	tick <- time.Now() // re-adds the watch if it is not back yet, and reads
	rec.waitFor(t, func(u Update) bool { return u.Plans["a"].Permits == 2 })

	// From now on, no tick: only the renewed watch can deliver.
	vol.write(map[string]string{"a.json": encode(t, doc("a", 3))})
	rec.waitFor(t, func(u Update) bool { return u.Plans["a"].Permits == 3 })
}

func TestNewDirSourceFailsFast(t *testing.T) {
	good := encode(t, doc("a", 1))
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
				dir = newVolume(t, tt.files).dir
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
		vol := newVolume(t, map[string]string{"a.json": good, "b.json": "{"})
		reg := prometheus.NewPedanticRegistry()
		s, err := NewDirSource(vol.dir, DirOptions{Options: Options{Subscriber: func(Update) {}, Registerer: reg}})
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
		vol := newVolume(t, map[string]string{"a.json": good})
		if _, err := NewDirSource(vol.dir, DirOptions{}); err == nil {
			t.Error("NewDirSource accepted options without a subscriber")
		}
	})
}

func TestDirSourceStartTwice(t *testing.T) {
	vol := newVolume(t, map[string]string{"a.json": encode(t, doc("a", 1))})
	rec := newRecorder()
	s, err := NewDirSource(vol.dir, DirOptions{Options: Options{Subscriber: rec.subscribe}})
	if err != nil {
		t.Fatal(err)
	}
	stop := startDir(t, s)
	rec.next(t)
	if err := s.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	stop()
	if n := rec.count(); n != 1 {
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

// version1Doc is a complete document as an operator of the previous major
// version publishes it: every pod's share alike, identified by its hash.
const version1Doc = `{"version":1,"gate":"a","downstream":"a.example.com","hash":"6bf7c0e76b4b373f444c17da734b5613",` +
	`"generation":3,"permits":5,"ratePerSecond":0,"burst":0,"queueCapacity":9,"maxQueueWaitSeconds":0.1,` +
	`"acquireTimeoutSeconds":0.1,"latencySeconds":0.22,"deadlineSeconds":2,"workers":5,"retryBudgetPerSecond":1.25}`

// A pod whose operator is rolled back (or not yet upgraded) meets version 1
// documents: they are rejected, counted and logged, and the gate keeps
// enforcing its last version 2 plan.
func TestVersion1DocumentKeepsTheLastPlan(t *testing.T) {
	a2 := doc("a", 2)
	vol := newVolume(t, map[string]string{"a.json": encode(t, a2)})
	rec := newRecorder()
	reg := prometheus.NewPedanticRegistry()
	logs := &logSink{}
	s, err := NewDirSource(vol.dir, DirOptions{
		Options:      Options{Subscriber: rec.subscribe, Registerer: reg, Logger: logs.logger()},
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	startDir(t, s)
	rec.next(t)

	vol.write(map[string]string{"a.json": version1Doc})
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.reloads.WithLabelValues(ResultError)) == 1 })
	rec.quiet(t, 300*time.Millisecond) // nothing new to enforce
	if got := s.Plans()["a"]; !plan.Equal(got, a2) {
		t.Errorf("the version 1 document replaced the plan: %+v", got)
	}
	if got := logs.count(`"msg"="Rejected plan document; the gate keeps its last good plan" "error"="reload: a.json: plan: version: unsupported version 1; this reader understands version 2"`); got != 1 {
		t.Errorf("the rejection was not logged once with its reason:\n%s", logs)
	}
	if got := logs.count(`"keptHash"="` + a2.Hash + `"`); got != 1 {
		t.Errorf("the log does not name the plan kept:\n%s", logs)
	}
	if got := testutil.ToFloat64(s.tracker.metrics.planInfo.WithLabelValues("a", a2.Hash)); got != 1 {
		t.Errorf("plan_info for the kept plan = %v, want 1", got)
	}

	// The next version 2 document is taken as usual.
	a3 := doc("a", 3)
	vol.write(map[string]string{"a.json": encode(t, a3)})
	rec.waitFor(t, func(u Update) bool { return plan.Equal(u.Plans["a"], a3) })
}

// A gate whose present document is rejected says so in
// backpressure_config_gate_rejected until a valid document replaces it, and
// keeps its last good plan meanwhile; the other gates read 0.
func TestDirSourceReportsARejectedDocumentUntilAValidOne(t *testing.T) {
	a1, b1 := doc("a", 1), doc("b", 1)
	vol := newVolume(t, map[string]string{"a.json": encode(t, a1), "b.json": encode(t, b1)})
	rec := newRecorder()
	reg := prometheus.NewPedanticRegistry()
	s, err := NewDirSource(vol.dir, DirOptions{
		Options:      Options{Subscriber: rec.subscribe, Registerer: reg},
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	startDir(t, s)
	rec.next(t)
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
	vol.write(map[string]string{"a.json": string(badJSON), "b.json": encode(t, b1)})
	waitUntil(t, func() bool { return testutil.ToFloat64(s.tracker.metrics.rejected.WithLabelValues("a")) == 1 })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected(1, 0)), "backpressure_config_gate_rejected"); err != nil {
		t.Errorf("after a bad document: %v", err)
	}
	rec.quiet(t, 300*time.Millisecond) // nothing new to enforce
	if got := s.Plans()["a"]; !plan.Equal(got, a1) {
		t.Errorf("the rejected document replaced the plan: %+v", got)
	}

	// Read again and again, the same bad document keeps the gauge at 1.
	time.Sleep(200 * time.Millisecond) // four polls
	if got := testutil.ToFloat64(s.tracker.metrics.rejected.WithLabelValues("a")); got != 1 {
		t.Errorf("after more polls of the same bad document: gauge %v, want 1", got)
	}

	a2 := doc("a", 2)
	vol.write(map[string]string{"a.json": encode(t, a2), "b.json": encode(t, b1)})
	rec.waitFor(t, func(u Update) bool { return plan.Equal(u.Plans["a"], a2) })
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected(0, 0)), "backpressure_config_gate_rejected"); err != nil {
		t.Errorf("after a valid document: %v", err)
	}
}
