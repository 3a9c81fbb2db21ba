package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

const testGate = "logistics-api"

// testPlan returns a valid plan for the test gate, every pod getting the
// same share of permits and waiting room, with a second to wait for a
// permit.
func testPlan(permits, queue int) plan.Document {
	return plantest.MakeDocument(testGate).Permits(permits).Queue(queue, time.Second).AcquireTimeout(time.Second).
		Latency(time.Millisecond).Obj()
}

// downstream is a fake downstream that counts its calls and the calls in
// flight, answers with status, and holds every call until released while
// hold is set.
type downstream struct {
	*httptest.Server
	status      atomic.Int64
	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	delay       atomic.Int64 // nanoseconds each call takes

	mu      sync.Mutex
	hold    bool
	release chan struct{}
}

func newDownstream(t testing.TB) *downstream {
	t.Helper()
	d := &downstream{release: make(chan struct{})}
	d.status.Store(http.StatusOK)
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		n := d.inFlight.Add(1)
		defer d.inFlight.Add(-1)
		for {
			m := d.maxInFlight.Load()
			if n <= m || d.maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		d.mu.Lock()
		hold, release := d.hold, d.release
		d.mu.Unlock()
		if hold {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		if delay := time.Duration(d.delay.Load()); delay > 0 {
			time.Sleep(delay)
		}
		w.WriteHeader(int(d.status.Load()))
		_, _ = io.WriteString(w, "quote 42\n")
	}))
	t.Cleanup(func() {
		d.unhold()
		d.Close()
	})
	return d
}

// holdCalls makes every later call wait until unhold.
func (d *downstream) holdCalls() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold = true
}

// unhold lets every held call finish.
func (d *downstream) unhold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hold {
		d.hold = false
		close(d.release)
		d.release = make(chan struct{})
	}
}

// logBuffer collects log output, safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// entries parses every line as a JSON object, failing on any that is not.
func (b *logBuffer) entries(t testing.TB) []map[string]any {
	t.Helper()
	return parseLog(t, b.String())
}

func parseLog(t testing.TB, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(text) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not one JSON object: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// withMsg returns the entries whose msg is msg.
func withMsg(entries []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, e := range entries {
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// gatewayProc is a gateway run in-process by run.
type gatewayProc struct {
	url string
	log *logBuffer
	// stop ends the gateway as SIGTERM would and returns run's error.
	stop func() error
}

// startGateway runs the gateway with args (the command line after the
// program name) until the test ends, and returns once it logs "Serving".
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	cfg, err := parseConfig(append([]string{"--listen", "127.0.0.1:0"}, args...), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, newLogger(logs)) }()

	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("gateway stopped before serving: %v\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("gateway not serving within 10s:\n%s", logs)
		}
		for _, e := range withMsg(logs.entries(t), "Serving") {
			addr, _ = e["address"].(string)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	var stopErr error
	stoppedByTest := false
	stop := func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	g := &gatewayProc{url: "http://" + addr + "/", log: logs, stop: func() error {
		stoppedByTest = true
		return stop()
	}}
	// Unless the test stopped it and checked the outcome itself, the
	// gateway must stop cleanly.
	t.Cleanup(func() {
		if err := stop(); err != nil && !stoppedByTest {
			t.Errorf("gateway: %v\n%s", err, logs)
		}
	})
	return g
}

// get calls the gateway once and returns the response with its body read.
func get(t testing.TB, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// gatewayBinary builds the gateway once per test run and returns its path.
func gatewayBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gateway-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "gateway")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = &buildError{err: err, out: string(out)}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		_ = os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}
