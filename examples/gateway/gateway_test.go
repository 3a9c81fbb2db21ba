package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

func TestFallbackWhenThePermitsAreTaken(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(2, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)

	ds.holdCalls()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if resp, body := get(t, gw.url); resp.StatusCode != http.StatusOK || body != "quote 42\n" {
				t.Errorf("held call: %d %q", resp.StatusCode, body)
			}
		})
	}
	eventually(t, 5*time.Second, "both permits in use", func() bool { return ds.inFlight.Load() == 2 })

	start := time.Now()
	resp, body := get(t, gw.url)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(FallbackHeader) != "queue-full" || body != "fallback: queue-full\n" {
		t.Errorf("third call: %d %s=%q %q; want 200 with the fallback", resp.StatusCode, FallbackHeader, resp.Header.Get(FallbackHeader), body)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the fallback took %v; it must be answered at once", waited)
	}
	if got := ds.calls.Load(); got != 2 {
		t.Errorf("the downstream saw %d calls, want 2: a shed call must not reach it", got)
	}
	ds.unhold()
	wg.Wait()
}

func TestDownstreamErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		args      []string
		wantCalls int64
	}{
		{"429 is not retried by default", http.StatusTooManyRequests, []string{"--max-retries", "2"}, 1},
		{"429 is retried when asked for", http.StatusTooManyRequests, []string{"--max-retries", "2", "--retry-on-429"}, 3},
		{"503 is retried", http.StatusServiceUnavailable, []string{"--max-retries", "1"}, 2},
		{"500 is not retried", http.StatusInternalServerError, []string{"--max-retries", "2"}, 1},
		{"no retries by default", http.StatusServiceUnavailable, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := newDownstream(t)
			ds.status.Store(int64(tt.status))
			dir := t.TempDir()
			plantest.Write(t, dir, testPlan(4, 0))
			gw := startGateway(t, append([]string{"--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir}, tt.args...)...)

			resp, _ := get(t, gw.url)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502", resp.StatusCode)
			}
			if got, want := resp.Header.Get(DownstreamStatusHeader), strconv.Itoa(tt.status); got != want {
				t.Errorf("%s = %q, want %q", DownstreamStatusHeader, got, want)
			}
			if resp.Header.Get(FallbackHeader) != "" {
				t.Error("a downstream error answered as a fallback")
			}
			if got := ds.calls.Load(); got != tt.wantCalls {
				t.Errorf("downstream calls %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

// Retries come from the plan's retry budget: with a budget of one token,
// the second failing request gets no retry.
func TestRetriesDrawOnThePlansBudget(t *testing.T) {
	ds := newDownstream(t)
	ds.status.Store(http.StatusServiceUnavailable)
	dir := t.TempDir()
	p := testPlan(4, 0)
	p.RetryBudgetPerSecond = 0.01 // one token, refilled after 100s
	p.Hash = ""
	plantest.Write(t, dir, p)
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir, "--max-retries", "3")

	get(t, gw.url)
	if got := ds.calls.Load(); got != 2 {
		t.Fatalf("first request: %d downstream calls, want 2 (one retry, then the budget is empty)", got)
	}
	get(t, gw.url)
	if got := ds.calls.Load(); got != 3 {
		t.Errorf("second request: %d downstream calls in all, want 3 (no token left to retry)", got)
	}
}

func TestNeverMoreInFlightThanPermits(t *testing.T) {
	ds := newDownstream(t)
	ds.delay.Store(int64(2 * time.Millisecond))
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(3, 64))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	served, shed := 0, 0
	for range 32 {
		wg.Go(func() {
			for range 10 {
				resp, err := client.Get(gw.url)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				mu.Lock()
				if resp.Header.Get(FallbackHeader) != "" {
					shed++
				} else if resp.StatusCode == http.StatusOK {
					served++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if got := ds.maxInFlight.Load(); got > 3 || got < 1 {
		t.Errorf("the downstream saw up to %d calls in flight; the plan allows 3", got)
	}
	if served+shed != 320 || served == 0 {
		t.Errorf("served %d, shed %d of 320", served, shed)
	}
}

func TestAPlanChangeResizesTheGate(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(1, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)

	bigger := testPlan(3, 0)
	written := time.Now()
	plantest.Write(t, dir, bigger)
	var applied map[string]any
	eventually(t, 5*time.Second, "the new plan is applied", func() bool {
		for _, e := range withMsg(gw.log.entries(t), "Applied plan") {
			if e["hash"] == bigger.Hash {
				applied = e
			}
		}
		return applied != nil
	})
	if applied["gate"] != testGate || applied["permits"] != float64(3) || applied["level"] != "INFO" {
		t.Errorf("Applied plan line = %v", applied)
	}
	if at, err := time.Parse(time.RFC3339Nano, applied["time"].(string)); err != nil || at.Before(written.Add(-time.Millisecond)) || time.Since(at) > 5*time.Second {
		t.Errorf("Applied plan time %v: want the moment the plan was applied, after the write at %v (err %v)", applied["time"], written, err)
	}

	// Three calls now go through at once; the fourth is shed.
	ds.holdCalls()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { get(t, gw.url) })
	}
	eventually(t, 5*time.Second, "three calls in flight", func() bool { return ds.inFlight.Load() == 3 })
	if resp, _ := get(t, gw.url); resp.Header.Get(FallbackHeader) != "queue-full" {
		t.Errorf("fourth call: %d without the fallback header", resp.StatusCode)
	}
	ds.unhold()
	wg.Wait()

	// The log: the first plan applied before Serving, then the new one.
	var order []string
	for _, e := range gw.log.entries(t) {
		switch e["msg"] {
		case "Applied plan":
			order = append(order, "Applied plan "+strconv.Itoa(int(e["permits"].(float64))))
		case "Serving":
			order = append(order, "Serving")
		}
	}
	if diff := cmp.Diff([]string{"Applied plan 1", "Serving", "Applied plan 3"}, order); diff != "" {
		t.Errorf("log order (-want +got):\n%s", diff)
	}
}

// The plan's deadline bounds the whole downstream call.
func TestThePlansDeadlineBoundsTheCall(t *testing.T) {
	ds := newDownstream(t)
	ds.delay.Store(int64(3 * time.Second))
	dir := t.TempDir()
	p := testPlan(4, 0)
	p.DeadlineSeconds, p.Hash = 0.2, ""
	plantest.Write(t, dir, p)
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)

	start := time.Now()
	resp, body := get(t, gw.url)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the call took %v; the plan's deadline is 200ms", took)
	}
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(DownstreamStatusHeader) != "" ||
		!strings.Contains(body, "deadline exceeded") {
		t.Errorf("got %d %s=%q %q; want 502 without a downstream status", resp.StatusCode,
			DownstreamStatusHeader, resp.Header.Get(DownstreamStatusHeader), body)
	}
}

func TestTheInboundGateProtectsThePod(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(8, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir, "--inbound-permits", "1")

	ds.holdCalls()
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, gw.url)
	}()
	eventually(t, 5*time.Second, "one call in flight", func() bool { return ds.inFlight.Load() == 1 })
	resp, body := get(t, gw.url)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || body != "queue_full\n" {
		t.Errorf("second request: %d Retry-After=%q %q; want 503 from the inbound gate",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	ds.unhold()
	<-done
}

func TestOnlyGetSlash(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(1, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)

	if resp, _ := get(t, gw.url+"other"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %d, want 404", resp.StatusCode)
	}
	resp, err := http.Post(gw.url, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
	if got := ds.calls.Load(); got != 0 {
		t.Errorf("the downstream saw %d calls", got)
	}
}

func TestMetrics(t *testing.T) {
	ds := newDownstream(t)
	ds.status.Store(http.StatusTooManyRequests)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(6, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir, "--metrics-listen", "127.0.0.1:0")
	get(t, gw.url)

	lines := withMsg(gw.log.entries(t), "Serving metrics")
	if len(lines) != 1 {
		t.Fatalf("no Serving metrics line:\n%s", gw.log)
	}
	_, body := get(t, "http://"+lines[0]["address"].(string)+"/metrics")
	for _, want := range []string{
		`backpressure_gate_permits{gate="logistics-api"} 6`,
		`backpressure_gate_admitted_total{gate="logistics-api"} 1`,
		`backpressure_downstream_http_responses_total{code="429",gate="logistics-api"} 1`,
		`backpressure_config_plan_info{gate="logistics-api",hash="` + testPlan(6, 0).Hash + `"} 1`,
		`backpressure_retry_budget_exhausted_total{gate="logistics-api"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A request still in flight when the shutdown timeout passes makes the
// shutdown fail rather than report a clean stop.
func TestShutdownTimeout(t *testing.T) {
	ds := newDownstream(t)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(1, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir, "--shutdown-timeout", "100ms")
	ds.holdCalls()
	go func() { _, _ = http.Get(gw.url) }()
	eventually(t, 5*time.Second, "a call in flight", func() bool { return ds.inFlight.Load() == 1 })

	err := gw.stop()
	if err == nil || !strings.Contains(err.Error(), "in-flight requests did not finish within 100ms") {
		t.Errorf("run: %v", err)
	}
	if len(withMsg(gw.log.entries(t), "Stopped")) != 0 {
		t.Error("logged Stopped after a shutdown that timed out")
	}
	ds.unhold()
}

// The inbound request's query reaches the downstream: a caller's parameters
// for the downstream call pass through the gate unchanged.
func TestTheQueryReachesTheDownstream(t *testing.T) {
	queries := make(chan string, 1)
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.RawQuery
		_, _ = io.WriteString(w, "quote 42\n")
	}))
	t.Cleanup(ds.Close)
	dir := t.TempDir()
	plantest.Write(t, dir, testPlan(2, 0))
	gw := startGateway(t, "--downstream", ds.URL, "--gate", testGate, "--plan-dir", dir)
	if resp, body := get(t, gw.url+"?latency=120ms&sku=7"); resp.StatusCode != http.StatusOK || body != "quote 42\n" {
		t.Fatalf("call: %d %q", resp.StatusCode, body)
	}
	if got := <-queries; got != "latency=120ms&sku=7" {
		t.Errorf("the downstream saw the query %q, want latency=120ms&sku=7", got)
	}
}
