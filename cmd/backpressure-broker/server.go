package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
	"github.com/backpressure-dev/backpressure-operator/internal/httpshutdown"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// server is the broker with its gRPC and metrics servers.
type server struct {
	cfg    config
	log    *slog.Logger
	broker *broker.Broker
	grpc   *grpc.Server
	health *health.Server
	lis    net.Listener
	// metrics is nil without --metrics-listen.
	metrics    *http.Server
	metricsLis net.Listener
	// rt and slices hold the slices the plan gives this pod (--gate); nil
	// with --capacity.
	rt     *backpressure.Runtime
	slices *slicer
}

func newServer(ctx context.Context, cfg config, log *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := broker.New(broker.Options{
		MaxLease: cfg.maxLease, Margin: cfg.margin, MaxWait: cfg.maxWait, PodRetention: cfg.podRetention,
		OfferAskTimeout: cfg.offerAskTimeout, OfferAsks: cfg.offerAsks,
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	for _, gate := range slices.Sorted(maps.Keys(cfg.capacity)) {
		if err := b.SetCapacity(gate, cfg.capacity[gate]); err != nil {
			return nil, fmt.Errorf("--capacity: %w", err)
		}
	}
	s := &server{cfg: cfg, log: log, broker: b, health: health.NewServer()}
	// Not Ready while learning: a Ready replica is given a slice of the
	// reserve and is sent borrows, and a learning one lends nothing, so
	// its slice would sit idle for --max-lease after every rollout. Not
	// Ready, it is left out of the division until it can lend.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if cfg.fromPlan() {
		if err := s.followPlan(ctx, reg); err != nil {
			return nil, err
		}
	}
	s.grpc = grpc.NewServer(
		// Borrowers keep their connections open between calls and ping
		// them so that a dead server is noticed before a borrow waits on
		// it; allow the pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	reservev1.RegisterReserveServer(s.grpc, broker.NewService(b))
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if s.lis, err = net.Listen("tcp", cfg.listen); err != nil {
		s.discardRuntime()
		return nil, fmt.Errorf("--listen-address: %w", err)
	}
	if cfg.metricsListen != "" {
		if s.metricsLis, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			_ = s.lis.Close()
			s.discardRuntime()
			return nil, fmt.Errorf("--metrics-listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		s.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		httpshutdown.CloseUnused(s.metrics)
	}
	return s, nil
}

// drainTimeout bounds how long a leaving server waits for its leases to
// end before it releases its slices: the longest lease, and a second for
// the expiry's sweep and a started server's learning (which ends within
// the longest lease of its start).
func (c config) drainTimeout() time.Duration { return c.maxLease + time.Second }

// followPlan opens the plan source the flags name and a Runtime whose
// gates hold this pod's slices, with acknowledgement when asked: the
// library's source, handover and release, with the leases counted as
// what the pod holds (see slicer.held).
func (s *server) followPlan(ctx context.Context, reg prometheus.Registerer) error {
	src, ack, err := s.cfg.Open("backpressure-broker")
	if err != nil {
		return err
	}
	if s.slices, err = newSlicer(s.broker, s.cfg.gates, s.log); err != nil {
		return err
	}
	// A quota that does not name this pod yet (it is not Ready, or the
	// operator has not published) gives it nothing: the server starts on
	// a slice of 0 rather than waiting for the plan.
	boot := make([]backpressure.Share, len(s.cfg.gates))
	for i, g := range s.cfg.gates {
		boot[i] = backpressure.Share{Gate: g, Limits: gate.Limits{Permits: 0}}
	}
	s.rt, err = backpressure.New(ctx, src, backpressure.Options{
		Registerer:     reg,
		Logger:         logr.FromSlogHandler(s.log.Handler()),
		PodName:        s.cfg.pod,
		PodNamespace:   s.cfg.podNamespace,
		Ack:            ack,
		Bootstrap:      boot,
		OnApplied:      s.slices.onApplied,
		Held:           s.slices.held,
		DrainTimeout:   s.cfg.drainTimeout(),
		ReleaseTimeout: s.cfg.shutdownTimeout,
	})
	if err != nil {
		return err
	}
	s.slices.setRuntime(s.rt)
	return nil
}

// discardRuntime gives up a Runtime that will not be started.
func (s *server) discardRuntime() {
	if s.rt != nil {
		_ = s.rt.Shutdown(context.Background())
	}
}

// addr is the gRPC listener's address.
func (s *server) addr() string { return s.lis.Addr().String() }

// metricsAddr is the metrics listener's address, "" without one.
func (s *server) metricsAddr() string {
	if s.metricsLis == nil {
		return ""
	}
	return s.metricsLis.Addr().String()
}

// serve serves until ctx ends, then stops taking borrows, lets those in
// progress (a waiting borrow waits at most --max-wait) end within
// --shutdown-timeout, and returns.
func (s *server) serve(ctx context.Context) error {
	errs := make(chan error, 2)
	go func() { errs <- s.grpc.Serve(s.lis) }()
	if s.metrics != nil {
		go func() {
			if err := s.metrics.Serve(s.metricsLis); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	expiry, stopExpiry := context.WithCancel(context.Background())
	defer stopExpiry()
	go s.serveOnceLearned(expiry)
	go func() { _ = s.broker.Run(expiry, s.cfg.expireEvery) }()
	sourceCtx, stopSource := context.WithCancel(context.Background())
	defer stopSource()
	followed := make(chan error, 1)
	if s.rt != nil {
		go s.slices.run(sourceCtx, s.cfg.expireEvery)
		go func() { followed <- s.rt.Start(sourceCtx) }()
	}
	s.log.Info("Serving", "address", s.addr(), "metrics", s.metricsAddr(), "capacity", capacityFlag(s.cfg.capacity).String(),
		"gates", s.cfg.gates, "learningUntil", s.broker.LearningUntil(), "incarnation", s.broker.Incarnation())

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	s.log.Info("Shutting down")
	s.health.Shutdown()
	if s.rt != nil {
		err = errors.Join(err, s.handBack(stopSource, followed))
	}
	// The pods' Offer streams last as long as the server: end them, or
	// the graceful stop would wait for them until its timeout. The pods
	// offer to another replica; the leases lent from their permits run on.
	s.broker.CloseOffers()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(s.cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.grpc.Stop()
	}
	if s.metrics != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
		defer cancel()
		_ = s.metrics.Shutdown(shutdownCtx)
	}
	return err
}

// handBack stops lending, then ends the Runtime, which waits (for at most
// the longest lease) until the leases have ended, returned or expired,
// and, with --acknowledge, annotates the pod "<epoch>/released" so that
// the operator gives the slices to the other replicas before the pod is
// gone. The gRPC server keeps serving meanwhile so that returns arrive.
func (s *server) handBack(stopSource context.CancelFunc, followed <-chan error) error {
	s.slices.stop()
	stopSource()
	timer := time.NewTimer(s.cfg.drainTimeout() + s.cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case err := <-followed:
		return err
	case <-timer.C:
		return fmt.Errorf("the slices were not drained and released within %v", s.cfg.drainTimeout()+s.cfg.shutdownTimeout)
	}
}

// serveOnceLearned reports the server healthy (Ready) once its learning
// ends, unless ctx ends first. After the health server's Shutdown the
// report is ignored.
func (s *server) serveOnceLearned(ctx context.Context) {
	t := time.NewTimer(time.Until(s.broker.LearningUntil()))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
}
