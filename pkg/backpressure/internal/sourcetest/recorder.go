package sourcetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// EventWait bounds every wait for something a source does.
const EventWait = 5 * time.Second

// Recorder is a subscriber that keeps every update U a source delivers.
type Recorder[U any] struct {
	mu      sync.Mutex
	updates []U
	ch      chan U
}

// NewRecorder returns an empty Recorder.
func NewRecorder[U any]() *Recorder[U] { return &Recorder[U]{ch: make(chan U, 1000)} }

// Subscribe records u; it is the source's subscriber.
func (r *Recorder[U]) Subscribe(u U) {
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
	r.ch <- u
}

// Count returns how many updates were delivered.
func (r *Recorder[U]) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.updates)
}

// Next waits up to EventWait for the next update.
func (r *Recorder[U]) Next(t testing.TB) U {
	t.Helper()
	select {
	case u := <-r.ch:
		return u
	case <-time.After(EventWait):
		t.Fatalf("no update within %v", EventWait)
		var zero U
		return zero
	}
}

// WaitFor waits up to EventWait for an update that satisfies ok, and
// returns it.
func (r *Recorder[U]) WaitFor(t testing.TB, ok func(U) bool) U {
	t.Helper()
	deadline := time.After(EventWait)
	for {
		select {
		case u := <-r.ch:
			if ok(u) {
				return u
			}
		case <-deadline:
			t.Fatalf("no matching update within %v", EventWait)
			var zero U
			return zero
		}
	}
}

// Quiet fails if an update arrives within d.
func (r *Recorder[U]) Quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case u := <-r.ch:
		t.Fatalf("unexpected update: %+v", u)
	case <-time.After(d):
	}
}

// LogSink records log lines. The zero value is ready to use.
type LogSink struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger, verbosity 1, that writes into s.
func (s *LogSink) Logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		s.lines = append(s.lines, args)
		s.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

// Count returns how many lines contain substr.
func (s *LogSink) Count(substr string) int {
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

// String returns the lines, one a line.
func (s *LogSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// Start runs start (a source's Start) until the test ends, and returns a
// function that stops it earlier; either way the test fails unless Start
// returns nil within 10 seconds of its context ending.
func Start(t testing.TB, start func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Start returned %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Start did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitUntil polls cond every few milliseconds, failing the test unless it
// holds within EventWait.
func WaitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(EventWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
