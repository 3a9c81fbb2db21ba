// Command backpressure-proxy is the backpressure operator's sidecar: an
// egress proxy that an application written in any language calls instead of
// its downstreams, and that enforces the pod's share of each downstream
// with the same gate, plan sources, metrics and acknowledgement as the Go
// library (pkg/backpressure).
//
//	backpressure-proxy \
//	    --route listen=127.0.0.1:9001,gate=logistics-api,upstream=https://logistics.example.com \
//	    --forward-listen 127.0.0.1:3128 --forward-host payments.internal=payments-api \
//	    --configmap search-gateway-backpressure --acknowledge
//
// Each --route is a local port standing for one downstream: the
// application sends plain HTTP to 127.0.0.1:9001 and the proxy calls the
// upstream URL (https included). --forward-listen serves HTTP_PROXY-style
// absolute-form requests for the hosts --forward-host maps to a gate;
// CONNECT is declined, since a tunnel would hide the calls it carries.
//
// A call the pod's share has no room for is answered at once by the proxy:
// 429 (rate limited) or 503 (no permit in time), with Retry-After and the
// header X-Backpressure-Rejected: true; it never reaches the downstream and
// must not be retried. Every other answer is the downstream's own, its 429s
// included, passed through as it came: status, headers, body, trailers,
// streamed as it arrives. SIGTERM stops taking calls, lets those in flight
// finish, then hands the pod's share back (see backpressure.Runtime.Start).
// Logs are JSON lines on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/backpressure-dev/backpressure-operator/internal/version"
)

func main() {
	log := newLogger(os.Stderr)
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil && cfg.version {
		fmt.Println("backpressure-proxy", version.Get())
		return
	}
	if err == nil {
		// SIGTERM (from the kubelet) or Ctrl-C starts a graceful shutdown;
		// a second one ends the process at once.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		context.AfterFunc(ctx, stop)
		err = run(ctx, cfg, log)
		stop()
	}
	if err != nil {
		log.Error("Proxy failed", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

// userAgent names the proxy to the API server.
const userAgent = "backpressure-proxy"

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	src, ack, err := cfg.Open(userAgent)
	if err != nil {
		return err
	}
	p, err := newProxy(ctx, cfg, src, ack, log)
	if err != nil {
		return err
	}
	return p.serve(ctx)
}

// newLogger returns the process's logger: JSON, one object per line.
// client-go, which logs through klog, is routed to it too, so that every
// line on stderr is JSON.
func newLogger(w io.Writer) *slog.Logger {
	h := slog.NewJSONHandler(w, nil)
	klog.SetLogger(logr.FromSlogHandler(h))
	return slog.New(h)
}
