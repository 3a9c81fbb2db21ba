// Command gateway is a runnable example of pkg/backpressure: an HTTP gateway that,
// for every GET /, calls one downstream through a gate sized by the
// backpressure operator, and follows the operator's plan while it runs.
//
//	gateway --downstream http://logistics.example.com --gate logistics-api \
//	        --configmap search-gateway-backpressure --namespace shop
//
// A call the pod's share has no room for is answered at once from a fallback
// (200 with the X-Backpressure-Fallback header) and never reaches the
// downstream; a downstream error is a 502 with X-Downstream-Status. Retries
// (--max-retries) draw on the plan's retry budget. An inbound gate
// (--inbound-permits) protects the process itself. SIGTERM drains in-flight
// requests, then hands the pod's share back (see backpressure.Runtime.Start).
// The gate enforces the pod's own share of each plan, picked by $POD_NAME;
// with --reserve-address a call whose share is full borrows a permit of the
// quota's reserve from the permit server (backpressure-broker).
// Logs are JSON lines on stderr: "Serving", "Applied plan" for every plan
// put in force and every lapse of its source and its end, "Stopped".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/internal/httpshutdown"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
)

func main() {
	log := newLogger(os.Stderr)
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
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
		log.Error("Gateway failed", "err", oneLine(err))
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	// 1. The plan: read once, fail fast without a valid one for our gate.
	src, ack, err := cfg.Open("backpressure-example-gateway")
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry() // this process's metrics; never the global registry
	opts := backpressure.Options{
		LendRules:  cfg.lendRules,
		Gates:      []string{cfg.gate},
		Registerer: reg,
		Logger:     logr.FromSlogHandler(log.Handler()), // logs "Applied plan" for every plan
		Ack:        ack,
		// Start drains the gate after the server has finished its requests,
		// so little is left; the whole shutdown is bounded anyway.
		DrainTimeout: cfg.shutdownTimeout,
	}
	closeReserve, err := reserveOptions(ctx, cfg, &opts)
	if err != nil {
		return err
	}
	defer closeReserve()
	rt, err := backpressure.New(ctx, src, opts)
	if err != nil {
		return err
	}

	// 2. Outbound: a client whose every call passes the plan's gate.
	responses, err := httpmw.NewMetrics(reg)
	if err != nil {
		return err
	}
	outbound, err := rt.Gate(cfg.gate) // named in Options.Gates: New made it
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &httpmw.Transport{
		Gate:    outbound,
		Base:    baseTransport(),
		Metrics: responses,
	}}

	// 3. Inbound: a fixed gate protecting this process, no waiting room.
	inbound, err := gate.New("inbound", gate.Limits{Permits: cfg.inboundPermits})
	if err != nil {
		return err
	}
	gw, err := newGateway(cfg, rt, client)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           httpmw.Middleware(inbound)(gw),
		ReadHeaderTimeout: 10 * time.Second,
	}
	httpshutdown.CloseUnused(srv)

	// 4. Serve, follow the plan, and drain on SIGTERM.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	var metricsSrv *http.Server
	if cfg.metricsListen != "" {
		if metricsSrv, err = serveMetrics(cfg.metricsListen, reg, log); err != nil {
			_ = ln.Close()
			return err
		}
	}
	log.Info("Serving", "address", ln.Addr().String())

	sourceCtx, stopSource := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- rt.Start(sourceCtx) }() // resizes the gate on every plan change
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	var failed error
	select {
	case <-ctx.Done():
	case failed = <-serveErr: // the listener broke
	}
	return errors.Join(failed, shutdown(cfg.shutdownTimeout, log, srv, metricsSrv, stopSource, started))
}

// reserveOptions connects to the permit server of --reserve-address and
// sets opts to borrow a permit of the quota's reserve from it when the
// pod's own share is full, and, with --reserve-offer, to offer the gate's
// idle permits to it until ctx is done or the Runtime stops; it returns
// what closes the connection. Without --reserve-address it sets nothing:
// no borrowing. grpc.NewClient connects lazily, so an unreachable server
// only makes borrows fail, and the calls go on with the pod's own share.
func reserveOptions(ctx context.Context, cfg config, opts *backpressure.Options) (func(), error) {
	rf := cfg.reserveFlags()
	client, conn, err := rf.Dial(cfg.pod)
	if err != nil || client == nil {
		return func() {}, err
	}
	opts.Lender = client.Lender
	if rf.Offer {
		opts.Offer, opts.OfferKeep = client.OfferFunc(ctx), rf.OfferKeep
	}
	return func() { _ = conn.Close() }, nil
}

// shutdown stops accepting connections and waits for in-flight requests
// (and their downstream calls) to finish; then it ends the Runtime's Start,
// which closes the gate, waits for anything still in flight on it and
// annotates the pod "<epoch>/released" (with --acknowledge), so that the
// operator hands this pod's share to the others before the process exits,
// and leaves nothing of the Runtime running; then it stops the metrics
// server. In that order the gate stays open for as long as
// requests are being finished.
func shutdown(timeout time.Duration, log *slog.Logger, srv, metricsSrv *http.Server,
	stopSource context.CancelFunc, started <-chan error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("in-flight requests did not finish within %v: %w", timeout, err))
	}
	stopSource()
	select {
	case err := <-started:
		if err != nil {
			errs = append(errs, err)
		}
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("the gate was not drained and released within %v", timeout))
	}
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(ctx)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	log.Info("Stopped")
	return nil
}
