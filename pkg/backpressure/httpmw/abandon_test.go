package httpmw

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/gatetest"
)

// holder is a downstream that holds /hold until answer is closed or the
// request ends, as a server that does not notice its client left would.
type holder struct {
	*httptest.Server
	holding atomic.Int64
	answer  chan struct{}
}

func newHolder() *holder {
	h := &holder{answer: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			h.holding.Add(1)
			defer h.holding.Add(-1)
			select {
			case <-h.answer:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	return h
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// abandon makes a call to /hold whose caller leaves after 100ms, by its
// deadline or by cancelling, and checks that it returns promptly with its
// context's error.
func abandon(t *testing.T, c *http.Client, url string, byDeadline bool) time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	want := context.Canceled
	if byDeadline {
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		want = context.DeadlineExceeded
	} else {
		time.AfterFunc(100*time.Millisecond, cancel)
	}
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/hold", nil)
	start := time.Now()
	resp, err := c.Do(req)
	left := time.Now()
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("the held call answered %d before its caller left", resp.StatusCode)
	}
	if !errors.Is(err, want) {
		t.Fatalf("the caller got %v, want %v", err, want)
	}
	if took := left.Sub(start); took > time.Second {
		t.Fatalf("the caller returned %v after the call began, long after it left at 100ms", took)
	}
	return left
}

func TestTransportKeepsAnAbandonedCallsPermitUntilTheDownstreamAnswers(t *testing.T) {
	for _, byDeadline := range []bool{true, false} {
		name := map[bool]string{true: "deadline", false: "cancelled"}[byDeadline]
		t.Run(name, func(t *testing.T) {
			goroutines := runtime.NumGoroutine()
			h := newHolder()
			g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
			base := h.Client().Transport.(*http.Transport)
			c := &http.Client{Transport: &Transport{Gate: g, Base: base}}

			abandon(t, c, h.URL, byDeadline)
			time.Sleep(200 * time.Millisecond) // well past the caller's leaving
			if n := h.holding.Load(); n != 1 {
				t.Fatalf("the downstream holds %d calls, want the abandoned one", n)
			}
			if n := g.InFlight(); n != 1 {
				t.Errorf("in flight while the downstream holds the abandoned call: %d, want 1", n)
			}
			if resp, err := c.Get(h.URL + "/"); !errors.Is(err, gate.ErrQueueFull) {
				if err == nil {
					_ = resp.Body.Close()
				}
				t.Errorf("a call while the abandoned one holds the only permit: %v, want queue full", err)
			}
			close(h.answer)
			waitFor(t, "the permit back once the downstream answered", func() bool { return g.InFlight() == 0 })
			gatetest.AssertNoLeak(t, g)

			// The permit is usable again, and nothing is left running.
			if r := get(t, c, h.URL+"/"); r.Code != http.StatusOK {
				t.Errorf("a call after the permit came back: %d", r.Code)
			}
			base.CloseIdleConnections()
			h.Close()
			waitFor(t, "every goroutine of the call to exit", func() bool { return runtime.NumGoroutine() <= goroutines })
		})
	}
}

func TestTransportCancelsAnAbandonedCallAfterLinger(t *testing.T) {
	const linger = 300 * time.Millisecond
	goroutines := runtime.NumGoroutine()
	h := newHolder() // never answers /hold on its own
	g := gatetest.New(t, "orders", gate.Limits{Permits: 1})
	base := h.Client().Transport.(*http.Transport)
	var asked atomic.Int64
	c := &http.Client{Transport: &Transport{Gate: g, Base: base, Linger: func() time.Duration {
		asked.Add(1)
		return linger
	}}}

	left := abandon(t, c, h.URL, false)
	if n := g.InFlight(); n != 1 {
		t.Errorf("in flight just after the caller left: %d, want 1", n)
	}
	waitFor(t, "the abandoned call cancelled after Linger", func() bool {
		return g.InFlight() == 0 && h.holding.Load() == 0
	})
	if took := time.Since(left); took < linger-50*time.Millisecond {
		t.Errorf("the permit came back %v after the caller left, before Linger (%v)", took, linger)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("Linger asked %d times, want once, when the caller left", n)
	}
	gatetest.AssertNoLeak(t, g)
	base.CloseIdleConnections()
	h.Close()
	waitFor(t, "every goroutine of the call to exit", func() bool { return runtime.NumGoroutine() <= goroutines })
}
