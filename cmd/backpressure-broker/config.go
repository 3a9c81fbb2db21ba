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
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

// config is the command line.
type config struct {
	listen        string
	metricsListen string
	// capacity is --capacity: fixed slices, for a server run by hand.
	capacity map[string]int
	// gates are the quotas whose slices the plan gives this pod (--gate),
	// read from the source sourceflags names; empty with --capacity.
	gates             []string
	sourceflags.Flags // where the plans come from, and acknowledgement
	// pod and podNamespace are $POD_NAME and $POD_NAMESPACE: the name the
	// plan gives this pod's slice under, and the pod acknowledged on.
	pod, podNamespace string
	maxLease          time.Duration
	margin            time.Duration
	maxWait           time.Duration
	podRetention      time.Duration
	offerAskTimeout   time.Duration
	offerAsks         int
	expireEvery       time.Duration
	shutdownTimeout   time.Duration
	version           bool
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

// gatesFlag collects --gate values.
type gatesFlag struct{ gates *[]string }

func (f gatesFlag) String() string {
	if f.gates == nil {
		return ""
	}
	return strings.Join(*f.gates, ",")
}

// Set adds one gate.
func (f gatesFlag) Set(s string) error {
	switch {
	case s == "":
		return errors.New("want the name of a DownstreamQuota, got an empty one")
	case slices.Contains(*f.gates, s):
		return fmt.Errorf("gate %q given twice", s)
	}
	*f.gates = append(*f.gates, s)
	return nil
}

// fromPlan reports whether the slices come from the plan (--gate) rather
// than from --capacity.
func (c config) fromPlan() bool { return len(c.gates) > 0 }

// parseConfig parses the command line; getenv supplies the pod's name and
// namespace (the downward API's POD_NAME and POD_NAMESPACE); usage and
// errors go to errOut.
func parseConfig(args []string, getenv func(string) string, errOut io.Writer) (config, error) {
	cfg := config{capacity: map[string]int{}, pod: getenv(backpressure.EnvPodName), podNamespace: getenv(backpressure.EnvPodNamespace)}
	fs := flag.NewFlagSet("backpressure-broker", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&cfg.listen, "listen-address", ":9443", "host:port of the gRPC server (the Reserve service and gRPC health)")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", ":8080", "host:port of /metrics and /healthz; empty for none")
	fs.Var(capacityFlag(cfg.capacity), "capacity", "GATE=PERMITS: a fixed slice of the gate's reserve, for a server run by hand (repeatable); not with --gate")
	fs.Var(gatesFlag{&cfg.gates}, "gate", "a DownstreamQuota whose reserve this server lends: its slice is what the quota's plan gives this pod ($"+backpressure.EnvPodName+"), read from --configmap or --plan-dir (repeatable)")
	cfg.Register(fs, getenv)
	fs.DurationVar(&cfg.maxLease, "max-lease", broker.DefaultMaxLease, "longest lease (a call's hold plus the margin); a started server lends nothing for this long")
	fs.DurationVar(&cfg.margin, "lease-margin", broker.DefaultMargin, "added to every call's hold: what outlives a call's deadline on the caller's side")
	fs.DurationVar(&cfg.maxWait, "max-wait", broker.DefaultMaxWait, "longest a borrow waits for a permit")
	fs.DurationVar(&cfg.podRetention, "pod-retention", broker.DefaultPodRetention, "how long a pod's borrow counts are kept after its last borrow")
	fs.DurationVar(&cfg.offerAskTimeout, "offer-ask-timeout", broker.DefaultOfferAskTimeout, "longest a borrow waits for one offering pod's answer before it asks the next")
	fs.IntVar(&cfg.offerAsks, "offer-asks", broker.DefaultOfferAsks, "most offering pods one borrow asks for an idle permit when the reserve is lent out")
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
	switch {
	case len(cfg.capacity) > 0 && (cfg.fromPlan() || cfg.ConfigMap != "" || cfg.PlanDir != "" || cfg.Acknowledge):
		errs = append(errs, errors.New("--capacity and --gate/--configmap/--plan-dir/--acknowledge: give the slices either by hand (--capacity) or from the plan (--gate with --configmap or --plan-dir), not both"))
	case len(cfg.capacity) == 0 && !cfg.fromPlan():
		errs = append(errs, errors.New("--gate: name at least one quota whose slice the plan gives this pod (with --configmap or --plan-dir), or give --capacity GATE=PERMITS"))
	case cfg.fromPlan():
		errs = append(errs, cfg.Check()...)
		if cfg.pod == "" {
			errs = append(errs, errors.New("--gate: the plan names this pod's slice by its name, and $"+backpressure.EnvPodName+" is empty (set it from the downward API, fieldRef metadata.name)"))
		}
	}
	for name, d := range map[string]time.Duration{"max-lease": cfg.maxLease, "max-wait": cfg.maxWait, "pod-retention": cfg.podRetention,
		"expire-interval": cfg.expireEvery, "shutdown-timeout": cfg.shutdownTimeout, "offer-ask-timeout": cfg.offerAskTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s: must be positive, got %s", name, d))
		}
	}
	if cfg.offerAsks < 1 {
		errs = append(errs, fmt.Errorf("--offer-asks: must be at least 1, got %d", cfg.offerAsks))
	}
	if cfg.margin < 0 || cfg.margin >= cfg.maxLease {
		errs = append(errs, fmt.Errorf("--lease-margin: must be at least 0 and below --max-lease %s, got %s", cfg.maxLease, cfg.margin))
	}
	return cfg, errors.Join(errs...)
}
