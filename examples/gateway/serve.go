package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// baseTransport is the transport the gated client sends admitted calls with.
// The default keeps two idle connections per host, so a gateway with dozens
// of calls in flight would open and close connections all the time.
func baseTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 1024
	t.MaxIdleConns = 1024
	return t
}

// serveMetrics serves reg's metrics on addr at /metrics, and logs the
// address it listens on.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	log.Info("Serving metrics", "address", ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	// Serve fails only when the listener does; the gateway then goes on
	// without metrics.
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
