package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

const testGate = "logistics-api"

// running is a proxy serving in the test process.
type running struct {
	*proxy
	logPath string // its JSON log lines
	cancel  context.CancelFunc
	done    chan struct{} // closed when serve has returned
	err     error         // serve's result, once done is closed
}

// stop ends serve's context and returns its result.
func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy did not stop within 30s")
		return nil
	}
}

// startProxy parses args (plus free metrics and probe ports on loopback
// unless args set them),
// opens the proxy and serves it until the test ends.
func startProxy(t testing.TB, ack *backpressure.AckOptions, args ...string) *running {
	t.Helper()
	if !strings.Contains(strings.Join(args, " "), "--metrics-listen") {
		args = append(args, "--metrics-listen", "127.0.0.1:0")
	}
	if !strings.Contains(strings.Join(args, " "), "--probe-listen") {
		args = append(args, "--probe-listen", "127.0.0.1:0")
	}
	cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("parseConfig(%q): %v", args, err)
	}
	src, _, err := cfg.Open(userAgent)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "proxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logFile.Close() })
	log := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := newProxy(t.Context(), cfg, src, ack, log)
	if err != nil {
		t.Fatalf("newProxy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{proxy: p, logPath: logPath, cancel: cancel, done: make(chan struct{})}
	go func() {
		r.err = p.serve(ctx)
		close(r.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
			if r.err != nil {
				t.Errorf("the proxy stopped with: %v", r.err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the proxy did not stop within 30s")
		}
	})
	return r
}

// metric returns the value of the sample whose line starts with series
// ("name{labels}") on the proxy's /metrics, and false when there is none.
func (r *running) metric(t testing.TB, series string) (string, bool) {
	t.Helper()
	_, body, _ := get(t, "http://"+r.metricsAddr+"/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest, true
		}
	}
	return "", false
}

// idle waits until no call holds a permit of gate. A client may read a
// whole answer before the proxy's handler has returned and let the permit
// go, so a test that calls again at once on a gate of one permit must wait.
func (r *running) idle(t testing.TB, gate string) {
	t.Helper()
	eventually(t, 5*time.Second, "the permits of "+gate+" back", func() bool {
		v, _ := r.metric(t, `backpressure_gate_in_flight{gate="`+gate+`"}`)
		return v == "0"
	})
}

// get calls url from Go and returns the status, the body and the trailers.
func get(t testing.TB, url string) (int, string, http.Header) {
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
	return resp.StatusCode, string(body), resp.Trailer
}

// eventually polls cond every 20ms for up to timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
