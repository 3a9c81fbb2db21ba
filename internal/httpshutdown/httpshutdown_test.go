package httpshutdown

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// Shutdown waits for the request in flight, and not for a connection that
// never carried one; the server's own ConnState hook still sees every
// change.
func TestShutdownWaitsForRequestsOnly(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{})
	var states atomic.Int32
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			close(arrived)
			<-release
			_, _ = io.WriteString(w, "done")
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState:         func(net.Conn, http.ConnState) { states.Add(1) },
	}
	CloseUnused(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	unused, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unused.Close() }()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		answer <- string(b)
	}()
	<-arrived

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	start := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// Without CloseUnused, Shutdown waits until the unused connection is
	// 5 s old; with it, as soon as the request ends (polling every 1–500 ms).
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("Shutdown returned %v after the request ended: it waited for the unused connection", waited)
	}
	if a := <-answer; a != "done" {
		t.Errorf("the request in flight got %q, want done", a)
	}
	if _, err := unused.Read(make([]byte, 1)); err == nil {
		t.Error("the unused connection is still open")
	}
	if states.Load() == 0 {
		t.Error("the server's own ConnState hook was not called")
	}
}
