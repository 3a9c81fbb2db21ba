package reload

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// doc returns a valid plan for gate with the given permits, every pod
// getting the base share; its revision is permits+1, so plans with distinct
// permits are distinct revisions.
func doc(gate string, permits int) plan.Document {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com",
		Epoch: "epoch-1", Revision: int64(permits) + 1,
		Permits: permits, QueueCapacity: 2 * permits, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.2, DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 1,
	}
	d.Hash = plan.Hash(d)
	return d
}

// encode marshals d, failing the test on error.
func encode(t testing.TB, d plan.Document) string {
	t.Helper()
	b, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// recorder is a Subscriber that keeps every update.
type recorder struct {
	mu      sync.Mutex
	updates []Update
	ch      chan Update
}

func newRecorder() *recorder { return &recorder{ch: make(chan Update, 1000)} }

func (r *recorder) subscribe(u Update) {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
	r.ch <- u
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.updates)
}

// next waits up to eventWait for the next update.
func (r *recorder) next(t testing.TB) Update {
	t.Helper()
	select {
	case u := <-r.ch:
		return u
	case <-time.After(eventWait):
		t.Fatalf("no update within %v", eventWait)
		return Update{}
	}
}

// waitFor waits up to eventWait for an update that satisfies ok, and
// returns it.
func (r *recorder) waitFor(t testing.TB, ok func(Update) bool) Update {
	t.Helper()
	deadline := time.After(eventWait)
	for {
		select {
		case u := <-r.ch:
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no matching update within %v", eventWait)
			return Update{}
		}
	}
}

// quiet fails if an update arrives within d.
func (r *recorder) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case u := <-r.ch:
		t.Fatalf("unexpected update: %+v", u)
	case <-time.After(d):
	}
}

// logSink records log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		s.lines = append(s.lines, args)
		s.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

// count returns how many lines contain substr.
func (s *logSink) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.lines {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}
