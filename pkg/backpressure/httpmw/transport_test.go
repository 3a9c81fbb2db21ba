package httpmw

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// downstream is a test server that counts its calls and how many run at
// once. /stream sends its headers at once and the rest of the body when
// finish is closed or the request ends; /429 throttles; anything else
// answers at once.
type downstream struct {
	*httptest.Server
	calls   atomic.Int64
	running gatetest.Concurrency
	finish  chan struct{}
}

func newDownstream(t *testing.T) *downstream {
	d := &downstream{finish: make(chan struct{})}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		d.running.Enter()
		defer d.running.Exit()
		switch r.URL.Path {
		case "/stream":
			_, _ = io.WriteString(w, "head ")
			w.(http.Flusher).Flush()
			select {
			case <-d.finish:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "tail")
		case "/429":
			w.Header().Set("Retry-After", "7")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/sleep":
			time.Sleep(time.Millisecond)
			_, _ = io.WriteString(w, "ok")
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *downstream) client(tr *Transport) *http.Client {
	tr.Base = d.Server.Client().Transport
	return &http.Client{Transport: tr}
}

func TestTransportHoldsThePermitUntilTheBodyIsDone(t *testing.T) {
	tests := []struct {
		name string
		// end finishes with the response in some way; it returns once the
		// call should have released its permit (or, for async, is about to).
		end   func(t *testing.T, resp *http.Response, d *downstream, cancel context.CancelFunc)
		async bool
	}{{
		name: "read to the end without Close",
		end: func(t *testing.T, resp *http.Response, d *downstream, _ context.CancelFunc) {
			close(d.finish)
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != "head tail" {
				t.Fatalf("body: %q, %v", b, err)
			}
		},
	}, {
		name: "read to the end, then Close",
		end: func(t *testing.T, resp *http.Response, d *downstream, _ context.CancelFunc) {
			close(d.finish)
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			_ = resp.Body.Close()
		},
	}, {
		name: "Close before the body is complete",
		end: func(t *testing.T, resp *http.Response, _ *downstream, _ context.CancelFunc) {
			_ = resp.Body.Close()
		},
	}, {
		name: "context cancelled while reading",
		end: func(t *testing.T, resp *http.Response, _ *downstream, cancel context.CancelFunc) {
			time.AfterFunc(10*time.Millisecond, cancel)
			if _, err := io.ReadAll(resp.Body); err == nil {
				t.Fatal("reading a cancelled call's body succeeded")
			}
		},
	}, {
		name: "context cancelled, body neither read nor closed",
		end: func(t *testing.T, _ *http.Response, _ *downstream, cancel context.CancelFunc) {
			cancel()
		},
		async: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
			d := newDownstream(t)
			c := d.client(&Transport{Gate: g})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/stream", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// The headers are in, the body is not: the call is in flight, and
			// the only permit is taken.
			if got := g.Stats().InFlight; got != 1 {
				t.Fatalf("in flight with the body open: got %d, want 1", got)
			}
			if _, err := c.Get(d.URL); !errors.Is(err, gate.ErrQueueFull) {
				t.Fatalf("second call while the body is open: got %v, want queue full", err)
			}
			tc.end(t, resp, d, cancel)
			if !tc.async {
				if got := g.Stats().InFlight; got != 0 {
					t.Fatalf("in flight once the body is done: got %d, want 0", got)
				}
			}
			gatetest.AssertNoLeak(t, g)
		})
	}
}

func TestTransportReleasesWhenNoBodyFollows(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	d := newDownstream(t)
	c := d.client(&Transport{Gate: g})
	// Neither body is closed: a 204 and a HEAD response have none to wait for.
	resp, err := c.Get(d.URL + "/empty")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /empty: %v, %v", resp, err)
	}
	if got := g.Stats().InFlight; got != 0 {
		t.Fatalf("in flight after a 204: got %d, want 0", got)
	}
	if resp, err = c.Head(d.URL); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD: %v, %v", resp, err)
	}
	if got := g.Stats().InFlight; got != 0 {
		t.Fatalf("in flight after a HEAD: got %d, want 0", got)
	}
	gatetest.AssertNoLeak(t, g)
}

// closeRecorder is a request body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

func TestTransportLocalRejection(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 10, RatePerSecond: 1.0 / 60, Burst: 1})
	d := newDownstream(t)
	tr := &Transport{Gate: g}
	c := d.client(tr)
	if resp, err := c.Get(d.URL); err != nil {
		t.Fatal(err)
	} else {
		_ = resp.Body.Close()
	}

	// Through http.Client, which wraps the error in *url.Error.
	_, err := c.Get(d.URL)
	rej, ok := errors.AsType[*gate.Rejection](err)
	if !ok {
		t.Fatalf("rate-limited call: got %v, want a *gate.Rejection", err)
	}
	if rej.Reason != gate.RateLimited || rej.Gate != "orders" || rej.RetryAfter <= 0 || rej.RetryAfter > time.Minute {
		t.Errorf("rejection: got %+v, want rate limited by gate orders, retry within a minute", rej)
	}
	if !errors.Is(err, gate.ErrRateLimited) {
		t.Errorf("errors.Is(%v, gate.ErrRateLimited) = false", err)
	}

	// Directly: the request body is closed although nothing is sent.
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequest(http.MethodPost, d.URL, body)
	if _, err := tr.RoundTrip(req); !errors.Is(err, gate.ErrRateLimited) {
		t.Errorf("RoundTrip: got %v, want rate limited", err)
	}
	if !body.closed.Load() {
		t.Error("RoundTrip did not close the body of a request it rejected")
	}
	if got := d.calls.Load(); got != 1 {
		t.Errorf("downstream calls: got %d, want 1: rejected calls must not be sent", got)
	}
}

func TestTransportReleasesWhenTheCallFails(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	d := newDownstream(t)
	c := d.client(&Transport{Gate: g})
	url := d.URL
	d.Close()
	for range 3 { // one permit: a leak would reject the later calls locally
		_, err := c.Get(url)
		if err == nil || errors.Is(err, gate.ErrRejected) {
			t.Fatalf("call to a closed server: got %v, want a connection error", err)
		}
	}
	gatetest.AssertNoLeak(t, g)
}

// A Transport without a gate is a programming error: it panics on its first
// call, closing the body and sending nothing, instead of calling out
// ungated or failing like a downstream would.
func TestTransportWithoutGatePanics(t *testing.T) {
	d := newDownstream(t)
	body := &closeRecorder{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequest(http.MethodPost, d.URL, body)
	func() {
		defer func() {
			if r := recover(); r != "httpmw: Transport.Gate is nil" {
				t.Errorf("recovered %v, want the nil gate's panic", r)
			}
		}()
		_, _ = (&Transport{}).RoundTrip(req)
	}()
	if !body.closed.Load() || d.calls.Load() != 0 {
		t.Errorf("body closed %v, downstream calls %d; want true, 0", body.closed.Load(), d.calls.Load())
	}
}

func TestTransportReportsThrottling(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 4})
	d := newDownstream(t)
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// A second Transport's Metrics on the same registry shares the counters.
	m2, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	var mu sync.Mutex
	var hints []string
	tr := &Transport{Gate: g, Metrics: m, OnThrottled: func(resp *http.Response) {
		mu.Lock()
		hints = append(hints, resp.Header.Get("Retry-After"))
		mu.Unlock()
	}}
	c := d.client(tr)
	c2 := d.client(&Transport{Gate: gatetest.New(t, "billing", gate.Limits{Permits: 1}), Metrics: m2})

	for _, path := range []string{"/429", "/", "/429", "/429", "/empty"} {
		resp, err := c.Get(d.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if resp, err := c2.Get(d.URL + "/429"); err == nil {
		_ = resp.Body.Close()
	}

	if got := tr.Throttled(); got != 3 {
		t.Errorf("Throttled: got %d, want 3", got)
	}
	if got := strings.Join(hints, ","); got != "7,7,7" {
		t.Errorf("OnThrottled saw Retry-After %q, want 7,7,7", got)
	}
	want := `
# HELP backpressure_downstream_http_responses_total Responses from the downstream to calls a gate admitted, by gate and HTTP status code.
# TYPE backpressure_downstream_http_responses_total counter
backpressure_downstream_http_responses_total{code="200",gate="orders"} 1
backpressure_downstream_http_responses_total{code="204",gate="orders"} 1
backpressure_downstream_http_responses_total{code="429",gate="billing"} 1
backpressure_downstream_http_responses_total{code="429",gate="orders"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	gatetest.AssertNoLeak(t, g)
}

// TestTransportLimitsConcurrency runs many callers through one Transport,
// each reading its response to the end: the downstream must never see more
// calls at once than the gate has permits, and must see that many.
func TestTransportLimitsConcurrency(t *testing.T) {
	const permits = 3
	g := gatetest.New(t, "orders", gate.Limits{Permits: permits, QueueCapacity: 64})
	d := newDownstream(t)
	close(d.finish) // /stream answers in full at once
	c := d.client(&Transport{Gate: g})

	var wg sync.WaitGroup
	for i := range 32 {
		path := []string{"/sleep", "/stream"}[i%2]
		wg.Go(func() {
			// A leaked permit would leave callers queued for good: bound
			// them so that the test fails instead of hanging.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for range 10 {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		})
	}
	wg.Wait()

	if got := d.running.Max(); got != permits {
		t.Errorf("most calls running at once downstream: got %d, want %d (the permits)", got, permits)
	}
	if got := d.calls.Load(); got != 320 {
		t.Errorf("downstream calls: got %d, want 320", got)
	}
	gatetest.AssertNoLeak(t, g)
}

// TestTransportLeaksNoPermit runs many callers through one Transport that
// read their bodies, close them early, abandon them to their context, or
// give up while queued. Whatever they do, every permit comes back exactly
// once.
//
// The downstream may briefly see more calls than permits here: a call whose
// caller gives up ends for the caller at once, while the server notices only
// when it next touches the connection.
func TestTransportLeaksNoPermit(t *testing.T) {
	const permits = 3
	g := gatetest.New(t, "orders", gate.Limits{Permits: permits, QueueCapacity: 64})
	d := newDownstream(t)
	// A /stream call abandoned before its headers arrived keeps draining
	// until the stream ends or Linger passes: keep that short.
	c := d.client(&Transport{Gate: g, Linger: func() time.Duration { return 50 * time.Millisecond }})

	var served, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		rng := rand.New(rand.NewPCG(uint64(i), 2))
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(20))*time.Millisecond)
				path := []string{"/sleep", "/stream"}[rng.IntN(2)]
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					gaveUp.Add(1)
					cancel()
					continue
				}
				served.Add(1)
				switch rng.IntN(3) {
				case 0: // read until the end or the context's
					_, _ = io.Copy(io.Discard, resp.Body)
				case 1:
					_ = resp.Body.Close()
				case 2: // abandoned: the context's end must release it
				}
				cancel()
			}
		})
	}
	wg.Wait()

	if served.Load() == 0 || gaveUp.Load() == 0 {
		t.Errorf("served %d, gave up %d: the test needs both", served.Load(), gaveUp.Load())
	}
	gatetest.AssertNoLeak(t, g)
}

// TestTransportHoldsUpgradedConnections checks a 101 Switching Protocols
// response: its body is the connection, written to as well as read, and the
// call holds its permit until it is closed.
func TestTransportHoldsUpgradedConnections(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw) // echo until the client closes
	}))
	defer ts.Close()
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	c := &http.Client{Transport: &Transport{Gate: g, Base: ts.Client().Transport}}
	req, _ := http.NewRequest(http.MethodGet, ts.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("the body of a 101 response is a %T, not an io.ReadWriteCloser", resp.Body)
	}
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	if n := g.Stats().InFlight; n != 1 {
		t.Errorf("in flight while the upgraded connection is open: got %d, want 1", n)
	}
	_ = conn.Close()
	if n := g.Stats().InFlight; n != 0 {
		t.Errorf("in flight once the upgraded connection is closed: got %d, want 0", n)
	}
	gatetest.AssertNoLeak(t, g)
}

// idleCloser is a base transport that records CloseIdleConnections.
type idleCloser struct {
	http.RoundTripper
	closed bool
}

func (c *idleCloser) CloseIdleConnections() { c.closed = true }

func TestTransportClosesIdleConnectionsOfItsBase(t *testing.T) {
	base := &idleCloser{}
	(&http.Client{Transport: &Transport{Gate: gatetest.New(t, "orders", gate.Limits{Permits: 1}), Base: base}}).CloseIdleConnections()
	if !base.closed {
		t.Error("http.Client.CloseIdleConnections did not reach the base transport")
	}
}
