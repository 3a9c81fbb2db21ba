package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/backpressure-dev/backpressure-operator/internal/httpshutdown"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
)

// proxy is the running sidecar: one server per route, one for forwarding,
// the Runtime that sizes their gates, and the metrics server.
type proxy struct {
	cfg     config
	log     *slog.Logger
	rt      *backpressure.Runtime
	servers []*server
	metrics *http.Server
	probes  *http.Server
	// metricsAddr and probeAddr are the listeners' addresses, "" without
	// them.
	metricsAddr, probeAddr string
	// stopping turns /readyz to 503 once shutdown has begun.
	stopping atomic.Bool
	// reserveConn is the connection to the permit server, nil without
	// --reserve-address.
	reserveConn *grpc.ClientConn
}

// reserveOptions connects to the permit server of --reserve-address and
// sets opts to borrow from it, each gate's Lender asking for leases that
// cover the linger after a call's deadline (see gated), and, with
// --reserve-offer, to offer the gates' idle permits to it until ctx is
// done or the Runtime stops. rt returns the Runtime, for the plans'
// deadlines, once it exists. It returns the connection.
func reserveOptions(ctx context.Context, cfg config, rt func() *backpressure.Runtime, opts *backpressure.Options) (*grpc.ClientConn, error) {
	rf := cfg.reserveFlags()
	client, conn, err := rf.Dial(cfg.pod)
	if err != nil {
		return nil, err
	}
	opts.Lender = func(name string) gate.Lender {
		linger := func() time.Duration { return lingerFor(rt(), name)() }
		return lingering{Lender: client.Lender(name), linger: linger}
	}
	opts.LendRules = rf.LendRules
	if rf.Offer {
		opts.Offer, opts.OfferKeep = client.OfferFunc(ctx), rf.OfferKeep
	}
	return conn, nil
}

// closeReserve closes the connection to the permit server, if any: the
// leases of calls still lent then end on their own.
func (p *proxy) closeReserve() {
	if p.reserveConn != nil {
		_ = p.reserveConn.Close()
	}
}

// server is one listener and what it serves.
type server struct {
	name string // the route's gate, or "forward"
	ln   net.Listener
	srv  *http.Server
}

// newProxy reads the plans (failing without a valid one for every gate
// named), makes the gates, and opens every listener. Nothing is served
// until serve.
func newProxy(ctx context.Context, cfg config, src backpressure.Source, ack *backpressure.AckOptions, log *slog.Logger) (p *proxy, err error) {
	p = &proxy{cfg: cfg, log: log}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := backpressure.Options{
		Gates:      cfg.gates(),
		Registerer: reg,
		Logger:     logr.FromSlogHandler(log.Handler()), // logs "Applied plan" for every plan
		// Kubernetes stops a native sidecar after the application, so
		// little is left in flight; the whole shutdown is bounded anyway.
		DrainTimeout: cfg.shutdownTimeout,
		Ack:          ack,
	}
	if cfg.reserveAddress != "" {
		conn, err := reserveOptions(ctx, cfg, func() *backpressure.Runtime { return p.rt }, &opts)
		if err != nil {
			return nil, err
		}
		p.reserveConn = conn
	}
	if p.rt, err = backpressure.New(ctx, src, opts); err != nil {
		p.closeReserve()
		return nil, err
	}
	defer func() {
		if err != nil {
			p.closeListeners()
			_ = p.rt.Shutdown(context.Background())
			p.closeReserve()
		}
	}()

	responses, err := httpmw.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	t := upstreamTransport()
	transport := func(gate string) http.RoundTripper {
		return countingTransport{next: t, gate: gate, responses: responses}
	}
	for _, r := range cfg.routes {
		g, err := p.rt.Gate(r.gate)
		if err != nil {
			return nil, err
		}
		linger := lingerFor(p.rt, r.gate)
		h := gated(g, newReverseProxy(r.upstream, transport(r.gate), log), linger, callLimit(cfg.maxCallDuration, linger), cfg.reserveAddress != "")
		if err := p.listen(r.gate, r.listen, h); err != nil {
			return nil, err
		}
	}
	if cfg.forwardListen != "" {
		fw, err := newForwarder(cfg.forwardHosts, p.rt, transport, cfg.maxCallDuration, cfg.reserveAddress != "", log)
		if err != nil {
			return nil, err
		}
		if err := p.listen("forward", cfg.forwardListen, fw); err != nil {
			return nil, err
		}
	}
	// The metrics (gate names, calls, rejections) stay in the pod unless
	// --metrics-listen says otherwise; the probes, which the kubelet sends
	// to the pod's IP, have a port of their own that serves nothing else.
	if cfg.metricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if p.metricsAddr, p.metrics, err = serveLocal("--metrics-listen", cfg.metricsListen, mux); err != nil {
			return nil, err
		}
		log.Info("Serving metrics", "address", p.metricsAddr)
	}
	if cfg.probeListen != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("/readyz", p.readyz)
		if p.probeAddr, p.probes, err = serveLocal("--probe-listen", cfg.probeListen, mux); err != nil {
			return nil, err
		}
		log.Info("Serving probes", "address", p.probeAddr)
	}
	return p, nil
}

// serveLocal serves h on addr, with tight timeouts: it answers small
// requests at once. Serve fails only when the listener does; the proxy goes
// on without it then.
func serveLocal(flag, addr string, h http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", flag, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: localReadTimeout,
		WriteTimeout: localWriteTimeout, IdleTimeout: idleTimeout}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), srv, nil
}

func (p *proxy) listen(name, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for %s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout}
	httpshutdown.CloseUnused(srv)
	p.servers = append(p.servers, &server{name: name, ln: ln, srv: srv})
	return nil
}

// readyz answers 200 while the proxy takes calls, 503 once it stops.
func (p *proxy) readyz(w http.ResponseWriter, _ *http.Request) {
	if p.stopping.Load() {
		http.Error(w, "stopping", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// addr returns the address the server named name listens on.
func (p *proxy) addr(name string) string {
	for _, s := range p.servers {
		if s.name == name {
			return s.ln.Addr().String()
		}
	}
	return ""
}

func (p *proxy) closeListeners() {
	for _, s := range p.servers {
		_ = s.ln.Close()
	}
	for _, srv := range []*http.Server{p.metrics, p.probes} {
		if srv != nil {
			_ = srv.Close()
		}
	}
}

// serve serves every listener and follows the plans until ctx ends, then
// shuts down gracefully (see shutdown). It returns early, after the same
// shutdown, when a listener fails.
func (p *proxy) serve(ctx context.Context) error {
	sourceCtx, stopSource := context.WithCancel(context.Background())
	defer stopSource()
	started := make(chan error, 1)
	go func() { started <- p.rt.Start(sourceCtx) }() // resizes the gates on every plan change

	serveErr := make(chan error, len(p.servers))
	for _, s := range p.servers {
		p.log.Info("Serving", "address", s.ln.Addr().String(), "gate", s.name)
		go func() {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("serve %s: %w", s.name, err)
			}
		}()
	}
	var failed error
	select {
	case <-ctx.Done():
	case failed = <-serveErr:
	}
	return errors.Join(failed, p.shutdown(stopSource, started))
}

// shutdown stops taking calls and waits for the calls in flight to finish;
// then it ends the Runtime's Start, which closes the gates, waits for
// anything still in flight and, with --acknowledge, annotates the pod
// "<epoch>/released" so that the operator hands this pod's share to the
// others before the process exits. That is the library's order: the gates
// stay open for as long as calls are being finished.
func (p *proxy) shutdown(stopSource context.CancelFunc, started <-chan error) error {
	p.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.shutdownTimeout)
	defer cancel()
	var errs []error
	done := make(chan error, len(p.servers))
	for _, s := range p.servers {
		go func() { done <- s.srv.Shutdown(ctx) }()
	}
	for range p.servers {
		if err := <-done; err != nil {
			errs = append(errs, fmt.Errorf("calls in flight did not finish within %v: %w", p.cfg.shutdownTimeout, err))
			break
		}
	}
	stopSource()
	select {
	case err := <-started:
		if err != nil {
			errs = append(errs, err)
		}
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("the gates were not drained and released within %v", p.cfg.shutdownTimeout))
	}
	for _, srv := range []*http.Server{p.metrics, p.probes} {
		if srv != nil {
			_ = srv.Shutdown(ctx)
		}
	}
	p.closeReserve()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	p.log.Info("Stopped")
	return nil
}
