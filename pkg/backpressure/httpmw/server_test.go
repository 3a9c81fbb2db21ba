package httpmw

import (
	"context"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

type reply struct {
	Code        int
	RetryAfter  string
	ContentType string
	Body        string
}

func get(t *testing.T, c *http.Client, url string) reply {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return reply{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), string(body)}
}

func withTimeout(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

func TestMiddlewareRejects(t *testing.T) {
	const text = "text/plain; charset=utf-8"
	tests := []struct {
		name   string
		limits gate.Limits
		opts   []Option
		// served requests complete before the probe; held ones stay in the
		// handler until it has been answered.
		served, held int
		// outer wraps the gated handler, e.g. to give requests a deadline.
		outer     func(http.Handler) http.Handler
		closeGate bool
		want      reply
	}{{
		name:   "rate limited: 429 with the time to the next token",
		limits: gate.Limits{Permits: 10, RatePerSecond: 1.0 / 30, Burst: 1},
		served: 1,
		want:   reply{http.StatusTooManyRequests, "30", text, "rate_limited\n"},
	}, {
		name:   "queue full",
		limits: gate.Limits{Permits: 1},
		held:   1,
		want:   reply{http.StatusServiceUnavailable, "1", text, "queue_full\n"},
	}, {
		name:   "queue full with a default Retry-After rounded up",
		limits: gate.Limits{Permits: 1},
		opts:   []Option{WithDefaultRetryAfter(2500 * time.Millisecond)},
		held:   1,
		want:   reply{http.StatusServiceUnavailable, "3", text, "queue_full\n"},
	}, {
		name:   "a default Retry-After below a second is sent as 1",
		limits: gate.Limits{Permits: 1},
		opts:   []Option{WithDefaultRetryAfter(0)},
		held:   1,
		want:   reply{http.StatusServiceUnavailable, "1", text, "queue_full\n"},
	}, {
		name:   "wait timeout",
		limits: gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 20 * time.Millisecond},
		held:   1,
		want:   reply{http.StatusServiceUnavailable, "1", text, "wait_timeout\n"},
	}, {
		name:   "deadline too short, from http.TimeoutHandler's deadline",
		limits: gate.Limits{Permits: 1, TypicalLatency: time.Hour},
		outer: func(h http.Handler) http.Handler {
			return http.TimeoutHandler(h, 10*time.Second, "timeout")
		},
		want: reply{http.StatusServiceUnavailable, "1", text, "deadline_too_short\n"},
	}, {
		name:   "request deadline passes while waiting",
		limits: gate.Limits{Permits: 1, QueueCapacity: 1},
		held:   1,
		outer:  withTimeout(30 * time.Millisecond),
		want:   reply{http.StatusServiceUnavailable, "1", text, "wait_deadline_exceeded\n"},
	}, {
		name:      "closed",
		limits:    gate.Limits{Permits: 1},
		closeGate: true,
		want:      reply{http.StatusServiceUnavailable, "1", text, "closed\n"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := gatetest.New(t, "orders", tc.limits)
			var calls int
			var mu sync.Mutex
			unblock := make(chan struct{})
			h := Middleware(g, tc.opts...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				if r.URL.Path == "/hold" {
					<-unblock
				}
				_, _ = io.WriteString(w, "ok")
			}))
			if tc.outer != nil {
				h = tc.outer(h)
			}
			ts := httptest.NewServer(h)
			defer ts.Close()
			c := ts.Client()

			for range tc.served {
				if got := get(t, c, ts.URL); got.Code != http.StatusOK {
					t.Fatalf("request before the probe: got %d, want 200", got.Code)
				}
			}
			var wg sync.WaitGroup
			for range tc.held {
				wg.Go(func() {
					if got := get(t, c, ts.URL+"/hold"); got.Code != http.StatusOK {
						t.Errorf("held request: got %d, want 200", got.Code)
					}
				})
			}
			gatetest.WaitInFlight(t, g, tc.held)
			if tc.closeGate {
				g.Close()
			}

			got := get(t, c, ts.URL+"/probe")
			close(unblock)
			wg.Wait()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rejected request (-want +got):\n%s", diff)
			}
			if want := tc.served + tc.held; calls != want {
				t.Errorf("handler ran %d times, want %d: a rejected request must not reach it", calls, want)
			}
			gatetest.WaitInFlight(t, g, 0)
		})
	}
}

func TestMiddlewareReleasesOnPanicAndRepanics(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	type result struct {
		recovered any
		inFlight  int
	}
	results := make(chan result, 1)
	// recoverer stands for the panic handling an application puts outside
	// the gate: it must see the handler's own panic, and a released permit.
	recoverer := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				results <- result{recover(), g.Stats().InFlight}
				w.WriteHeader(http.StatusInternalServerError)
			}()
			next.ServeHTTP(w, r)
		})
	}
	ts := httptest.NewServer(recoverer(Middleware(g)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	}))))
	defer ts.Close()

	for i := range 3 { // one permit: a leak would turn the later requests into 503s
		if got := get(t, ts.Client(), ts.URL); got.Code != http.StatusInternalServerError {
			t.Fatalf("request %d: got %d, want 500 from the recoverer", i, got.Code)
		}
		if diff := cmp.Diff(result{"boom", 0}, <-results, cmp.AllowUnexported(result{})); diff != "" {
			t.Errorf("request %d: after the panic (-want +got):\n%s", i, diff)
		}
	}
}

func TestMiddlewareReleasesOnAbortedHandler(t *testing.T) {
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	ts := httptest.NewUnstartedServer(Middleware(g)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler) // net/http's own way to abort a response
	})))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.Start()
	defer ts.Close()

	for range 3 {
		if _, err := ts.Client().Get(ts.URL); err == nil {
			t.Fatal("an aborted handler's response arrived")
		}
	}
	gatetest.AssertNoLeak(t, g)
}

// TestMiddlewareLimitsConcurrency checks under load what the gate promises:
// the handler never runs more often at once than there are permits, every
// request is either served or rejected with 503, and clients that give up
// while waiting or while served leave no permit behind.
func TestMiddlewareLimitsConcurrency(t *testing.T) {
	const permits = 4
	g := gatetest.New(t, "orders", gate.Limits{Permits: permits, QueueCapacity: 16, MaxQueueWait: 50 * time.Millisecond})
	var running gatetest.Concurrency
	ts := httptest.NewServer(Middleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Enter()
		defer running.Exit()
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	})))
	defer ts.Close()
	c := ts.Client()

	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 48 {
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					// An impatient client: gone while queued or while served.
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(3000))*time.Microsecond)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
				resp, err := c.Do(req)
				code := -1 // the client gave up
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					code = resp.StatusCode
				}
				cancel()
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	if got := running.Max(); got != permits {
		t.Errorf("most handlers running at once: got %d, want %d (the permits)", got, permits)
	}
	for code := range codes {
		if code != http.StatusOK && code != http.StatusServiceUnavailable && code != -1 {
			t.Errorf("got %d responses with status %d, want only 200 and 503", codes[code], code)
		}
	}
	if codes[http.StatusOK] == 0 {
		t.Errorf("no request was served: %v", codes)
	}
	t.Logf("responses by status (-1: client gave up): %v", codes)
	gatetest.AssertNoLeak(t, g)
}

func TestMiddlewareWithoutGatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Middleware(nil) did not panic")
		}
	}()
	Middleware(nil)
}
