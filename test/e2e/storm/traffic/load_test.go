package traffic

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestEndpointsRoundRobin(t *testing.T) {
	var e Endpoints
	if _, ok := e.Pick(); ok {
		t.Fatal("Pick() on no endpoints succeeded")
	}
	e.Add("a")
	e.Add("b")
	e.Add("b")
	e.Add("c")
	got := map[string]int{}
	for range 9 {
		ep, _ := e.Pick()
		got[ep.URL]++
	}
	if diff := cmp.Diff(map[string]int{"a": 3, "b": 3, "c": 3}, got); diff != "" {
		t.Errorf("picks (-want +got):\n%s", diff)
	}
	e.Remove("b")
	for range 4 {
		if ep, _ := e.Pick(); ep.URL == "b" {
			t.Fatal("picked a removed endpoint")
		}
	}
	if e.Len() != 2 {
		t.Errorf("Len() = %d, want 2", e.Len())
	}
}

// gatewayDouble answers with each of the answers examples/gateway's contract
// names, in turn: a success, a fallback, a 502, a pod's own 503, and
// something else.
func gatewayDouble() *httptest.Server {
	var n atomic.Int64
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 5 {
		case 0:
			w.WriteHeader(http.StatusOK)
		case 1:
			w.Header().Set(FallbackHeader, "rate-limited")
			w.WriteHeader(http.StatusOK)
		case 2:
			w.Header().Set(DownstreamStatusHeader, "429")
			w.WriteHeader(http.StatusBadGateway)
		case 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 4:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
}

// TestEndpointsRemoveClosesIdleConnections checks that a pod leaving the
// endpoints is not kept waiting by the harness's idle keep-alive
// connections when it shuts down.
func TestEndpointsRemoveClosesIdleConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	e := Endpoints{Timeout: time.Second}
	e.Add(srv.URL)
	ep, _ := e.Pick()
	resp, err := ep.Client.Get(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	e.Remove(srv.URL)
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the idle connection to a removed endpoint stayed open")
	}
}

func TestLoadOpenLoopRateAndOutcomes(t *testing.T) {
	srv := gatewayDouble()
	defer srv.Close()
	e := Endpoints{Timeout: 5 * time.Second}
	e.Add(srv.URL)
	defer e.Close()
	// Room for every request at once: on a starved machine the double may
	// answer late, and dropping is TestLoadDropsWhenTheHarnessFallsBehind's
	// subject, not this test's.
	l := &Load{Rate: 500, Endpoints: &e, MaxOutstanding: 500}
	start := time.Now()
	res := l.Run(context.Background(), start, time.Second)

	if res.Due != 500 || res.Dropped != 0 || res.NoEndpoint != 0 {
		t.Fatalf("Due %d, Dropped %d, NoEndpoint %d; want 500 sent", res.Due, res.Dropped, res.NoEndpoint)
	}
	if got := res.AchievedPerSecond(); got < 490 || got > 510 {
		t.Errorf("AchievedPerSecond() = %v, want 500", got)
	}
	for o := range NumOutcomes {
		if res.Outcomes[o] != 100 {
			t.Errorf("outcome %s: %d, want 100", o, res.Outcomes[o])
		}
	}
	if diff := cmp.Diff(map[string]int64{"rate-limited": 100}, res.ShedReasons); diff != "" {
		t.Errorf("ShedReasons (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"429": 100}, res.DownstreamStatuses); diff != "" {
		t.Errorf("DownstreamStatuses (-want +got):\n%s", diff)
	}
	if len(res.Records) != 500 {
		t.Fatalf("%d records", len(res.Records))
	}
	// Open loop: the sends spread over the second, not all at once. (A
	// starved machine may send the last ones late, never early.)
	var early, late int
	for _, r := range res.Records {
		if r.At < 0 {
			t.Errorf("record sent at %v, before the run", r.At)
		}
		if r.At < 500*time.Millisecond {
			early++
		} else {
			late++
		}
	}
	if early < 100 || late < 100 {
		t.Errorf("%d sends in the first half, %d in the second; want them spread evenly", early, late)
	}
}

func TestLoadDropsWhenTheHarnessFallsBehind(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	e := Endpoints{Timeout: 5 * time.Second}
	e.Add(srv.URL)
	defer e.Close()
	l := &Load{Rate: 200, Endpoints: &e, MaxOutstanding: 3}
	done := make(chan *LoadResult)
	go func() { done <- l.Run(context.Background(), time.Now(), 250*time.Millisecond) }()
	time.Sleep(400 * time.Millisecond)
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	res := <-done
	if res.Due != 50 || res.Dropped != 47 || res.Sent() != 3 {
		t.Errorf("Due %d, Dropped %d, Sent %d; want 50, 47, 3", res.Due, res.Dropped, res.Sent())
	}
}

func TestLoadCountsNoEndpoint(t *testing.T) {
	l := &Load{Rate: 100, Endpoints: &Endpoints{}, MaxOutstanding: 10}
	res := l.Run(context.Background(), time.Now(), 100*time.Millisecond)
	if res.NoEndpoint != 10 || res.Sent() != 0 {
		t.Errorf("NoEndpoint %d, Sent %d; want 10, 0", res.NoEndpoint, res.Sent())
	}
}

func TestLoadStopsWithContext(t *testing.T) {
	srv := gatewayDouble()
	defer srv.Close()
	e := Endpoints{Timeout: time.Second}
	e.Add(srv.URL)
	defer e.Close()
	l := &Load{Rate: 100, Endpoints: &e, MaxOutstanding: 10}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	res := l.Run(ctx, t0, time.Minute)
	if time.Since(t0) > 2*time.Second || res.Duration > time.Second {
		t.Errorf("Run took %v (Duration %v) after its context ended", time.Since(t0), res.Duration)
	}
}
