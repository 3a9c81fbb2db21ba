package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is a real HTTP server on 127.0.0.1 standing for the downstream:
//
//	/echo      the request as the downstream saw it, as JSON
//	/upload    the SHA-256 of the request body and its length
//	/download  the large body (its SHA-256 in X-Body-Sha256)
//	/stream    "chunk-1\n", flushed; then, once next is signalled,
//	           "chunk-2\n" and the trailer X-Stream-Trailer
//	/throttle  the downstream's own 429, with Retry-After: 7
//	/hold      waits until release is closed, counting the calls in flight
type upstream struct {
	*httptest.Server
	big     []byte
	bigSum  string
	next    chan struct{}
	release chan struct{}
	once    sync.Once
	calls   atomic.Int64
	holding atomic.Int64
}

// startUpstream starts the server; bigSize is the size of /download's body.
func startUpstream(t testing.TB, bigSize int) *upstream {
	t.Helper()
	u := &upstream{next: make(chan struct{}, 1), release: make(chan struct{})}
	if bigSize > 0 {
		u.big = make([]byte, bigSize)
		r := rand.NewChaCha8([32]byte{1, 2, 3})
		_, _ = r.Read(u.big)
		sum := sha256.Sum256(u.big)
		u.bigSum = hex.EncodeToString(sum[:])
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "uri": r.RequestURI, "host": r.Host, "header": r.Header,
		})
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Body-Length", strconv.FormatInt(n, 10))
		_, _ = io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Body-Sha256", u.bigSum)
		w.Header().Set("Content-Length", strconv.Itoa(len(u.big)))
		_, _ = w.Write(u.big)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Stream-Trailer")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "chunk-1\n")
		http.NewResponseController(w).Flush()
		select {
		case <-u.next:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
			// The client never saw chunk-1: the stream was buffered.
			_, _ = io.WriteString(w, "timeout\n")
			return
		}
		_, _ = io.WriteString(w, "chunk-2\n")
		w.Header().Set("X-Stream-Trailer", "done")
	})
	mux.HandleFunc("/throttle", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.Header().Set("X-Downstream", "logistics")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, "downstream says slow down\n")
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		u.holding.Add(1)
		defer u.holding.Add(-1)
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "held\n")
	})
	// The same handlers under /base/, for a route whose upstream has a path:
	// registered before the server starts, so no test swaps the handler of
	// a running server.
	mux.Handle("/base/", http.StripPrefix("/base", mux))
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		u.releaseAll()
		u.Close()
	})
	return u
}

// releaseAll lets every /hold call end.
func (u *upstream) releaseAll() { u.once.Do(func() { close(u.release) }) }
