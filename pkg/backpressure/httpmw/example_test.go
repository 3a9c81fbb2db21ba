package httpmw_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
)

func ExampleMiddleware() {
	// Eight requests at once, and one a minute: the second request is
	// rate limited.
	g, err := gate.New("checkout", gate.Limits{Permits: 8, RatePerSecond: 1.0 / 60, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := httptest.NewServer(httpmw.Middleware(g)(mux))
	defer srv.Close()

	for range 2 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("%d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Output:
	// 200 Retry-After="" ok
	// 429 Retry-After="60" rate_limited
}

func ExampleTransport() {
	// A downstream that throttles /busy.
	downstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	defer downstream.Close()

	g, err := gate.New("inventory", gate.Limits{Permits: 2, QueueCapacity: 16, MaxQueueWait: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// The process's own registry, never the global one.
	metrics, err := httpmw.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		log.Fatal(err)
	}
	tr := &httpmw.Transport{Gate: g, Metrics: metrics}
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	for _, path := range []string{"/items", "/busy"} {
		resp, err := client.Get(downstream.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		// The call holds its permit until the body is read to the end or
		// closed.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		fmt.Println(path, resp.StatusCode)
	}
	fmt.Println("throttled by the downstream:", tr.Throttled())

	// A call the gate sheds is never sent.
	g.Close()
	_, err = client.Get(downstream.URL + "/items")
	if rej, ok := errors.AsType[*gate.Rejection](err); ok {
		fmt.Println("shed locally:", rej.Reason)
	}
	// Output:
	// /items 200
	// /busy 429
	// throttled by the downstream: 1
	// shed locally: closed
}
