package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// config is the command line.
type config struct {
	listen          string
	metricsListen   string
	capacity        map[string]int
	maxLease        time.Duration
	margin          time.Duration
	maxWait         time.Duration
	podRetention    time.Duration
	expireEvery     time.Duration
	shutdownTimeout time.Duration
	version         bool
}

// capacityFlag collects --capacity GATE=N values.
type capacityFlag map[string]int

func (f capacityFlag) String() string {
	var parts []string
	for _, gate := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, fmt.Sprintf("%s=%d", gate, f[gate]))
	}
	return strings.Join(parts, ",")
}

// Set parses GATE=N.
func (f capacityFlag) Set(s string) error {
	gate, n, ok := strings.Cut(s, "=")
	v, err := strconv.Atoi(n)
	if !ok || gate == "" || err != nil || v < 0 {
		return fmt.Errorf("want GATE=PERMITS with PERMITS at least 0, such as logistics-api=8, got %q", s)
	}
	if _, dup := f[gate]; dup {
		return fmt.Errorf("gate %q given twice", gate)
	}
	f[gate] = v
	return nil
}

// parseConfig parses the command line; usage and errors go to errOut.
func parseConfig(args []string, errOut io.Writer) (config, error) {
	cfg := config{capacity: map[string]int{}}
	fs := flag.NewFlagSet("backpressure-broker", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&cfg.listen, "listen-address", ":9443", "host:port of the gRPC server (the Reserve service and gRPC health)")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", ":8080", "host:port of /metrics and /healthz; empty for none")
	fs.Var(capacityFlag(cfg.capacity), "capacity", "GATE=PERMITS: this server's slice of the gate's reserve (repeatable)")
	fs.DurationVar(&cfg.maxLease, "max-lease", broker.DefaultMaxLease, "longest lease (a call's hold plus the margin); a started server lends nothing for this long")
	fs.DurationVar(&cfg.margin, "lease-margin", broker.DefaultMargin, "added to every call's hold: what outlives a call's deadline on the caller's side")
	fs.DurationVar(&cfg.maxWait, "max-wait", broker.DefaultMaxWait, "longest a borrow waits for a permit")
	fs.DurationVar(&cfg.podRetention, "pod-retention", broker.DefaultPodRetention, "how long a pod's borrow counts are kept after its last borrow")
	fs.DurationVar(&cfg.expireEvery, "expire-interval", 10*time.Millisecond, "how often leases that were not returned are ended and their permits lent to waiting borrows")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "longest a graceful shutdown waits for the calls in progress")
	fs.BoolVar(&cfg.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if cfg.version {
		return cfg, nil
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen-address: %q is not host:port", cfg.listen))
	}
	if cfg.metricsListen != "" {
		if _, _, err := net.SplitHostPort(cfg.metricsListen); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen: %q is not host:port", cfg.metricsListen))
		}
	}
	if len(cfg.capacity) == 0 {
		errs = append(errs, errors.New("--capacity: give at least one GATE=PERMITS"))
	}
	for name, d := range map[string]time.Duration{"max-lease": cfg.maxLease, "max-wait": cfg.maxWait, "pod-retention": cfg.podRetention, "expire-interval": cfg.expireEvery, "shutdown-timeout": cfg.shutdownTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s: must be positive, got %s", name, d))
		}
	}
	if cfg.margin < 0 || cfg.margin >= cfg.maxLease {
		errs = append(errs, fmt.Errorf("--lease-margin: must be at least 0 and below --max-lease %s, got %s", cfg.maxLease, cfg.margin))
	}
	return cfg, errors.Join(errs...)
}
