package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

// BenchmarkProxy measures what the proxy costs a call on loopback, beside
// a direct call to the downstream and beside a plain httputil.ReverseProxy
// with the same transport and flushing, in the same run:
//
//   - mode=latency: one client, calls one after another; ns/op is the mean,
//     p50-µs and p99-µs the percentiles of the calls' durations;
//   - mode=throughput: 16 clients at once (b.RunParallel, parallelism 8 per
//     GOMAXPROCS); ns/op is the inverse of the throughput, calls/s.
//
// Both report cpu-µs/op, the CPU time (user and system) the whole process
// (client, proxy and downstream) spent per call: on a shared machine it
// moves much less with the neighbours' load than the wall-clock figures,
// and its difference between two vias is what the extra hop costs.
//
// The client, the proxy and the downstream share the machine's cores; run
// with -cpu 2 for the two cores of the goal. `make bench-proxy` runs it and
// compares the three with benchstat.
func BenchmarkProxy(b *testing.B) {
	body := []byte(`{"quote":"42.00","currency":"EUR","carrier":"logistics"}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)

	// The plain reverse proxy gets the proxy's transport, flushing and
	// server settings: what differs is the gate and the rejection marker.
	plain := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     upstreamTransport(),
		FlushInterval: -1,
	})
	plain.Config.ReadHeaderTimeout = readHeaderTimeout
	plain.Start()
	defer plain.Close()

	dir := b.TempDir()
	plantest.Write(b, dir, plantest.MakeDocument(testGate).Permits(10000).Obj())
	bp := startProxy(b, nil, "--plan-dir", dir, "--metrics-listen", "",
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+up.URL)
	defer func() { _ = bp.stop(b) }()

	vias := []struct{ name, url string }{
		{"direct", up.URL},
		{"reverseproxy", plain.URL},
		{"backpressure", "http://" + bp.addr(testGate)},
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, DisableCompression: true, Proxy: nil,
	}}
	call := func(b *testing.B, u string) {
		resp, err := client.Get(u + "/quote")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n != int64(len(body)) {
			b.Fatalf("%s: %d, %d bytes, %v", u, resp.StatusCode, n, err)
		}
	}

	for _, via := range vias {
		b.Run("mode=latency/via="+via.name, func(b *testing.B) {
			call(b, via.url) // a connection ready before the clock starts
			took := make([]time.Duration, 0, b.N)
			cpu0 := cpuTime(b)
			for b.Loop() {
				t0 := time.Now()
				call(b, via.url)
				took = append(took, time.Since(t0))
			}
			reportCPU(b, cpu0)
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
	for _, via := range vias {
		b.Run("mode=throughput/via="+via.name, func(b *testing.B) {
			b.SetParallelism(8)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call(b, via.url)
				}
			})
			reportCPU(b, cpu0)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
	client.CloseIdleConnections()
}

// cpuTime returns the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time used since since per call.
func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64((cpuTime(b)-since).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}
