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
}

func newServer(cfg config, log *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b, err := broker.New(broker.Options{
		MaxLease: cfg.maxLease, Margin: cfg.margin, MaxWait: cfg.maxWait, PodRetention: cfg.podRetention,
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
	s.grpc = grpc.NewServer(
		// Borrowers keep their connections open between calls and ping
		// them so that a dead server is noticed before a borrow waits on
		// it; allow the pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	reservev1.RegisterReserveServer(s.grpc, broker.NewService(b))
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if s.lis, err = net.Listen("tcp", cfg.listen); err != nil {
		return nil, fmt.Errorf("--listen-address: %w", err)
	}
	if cfg.metricsListen != "" {
		if s.metricsLis, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			_ = s.lis.Close()
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
	go func() { _ = s.broker.Run(expiry, s.cfg.expireEvery) }()
	s.log.Info("Serving", "address", s.addr(), "metrics", s.metricsAddr(), "capacity", capacityFlag(s.cfg.capacity).String(),
		"learningUntil", s.broker.LearningUntil(), "incarnation", s.broker.Incarnation())

	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	s.log.Info("Shutting down")
	s.health.Shutdown()
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
