package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

// config is the command line.
type config struct {
	listen            string
	downstream        *url.URL
	gate              string
	sourceflags.Flags // where the plan comes from, and acknowledgement
	maxRetries        int
	retryOn429        bool
	inboundPermits    int
	metricsListen     string
	shutdownTimeout   time.Duration
	// reserveAddress is the permit server (backpressure-broker) the gate
	// borrows from when the pod's own share is full; "" for none.
	reserveAddress string
	// reserveBudget bounds a borrow's round trip beyond its wait.
	reserveBudget time.Duration
	// lendRules are the rules the gate borrows by.
	lendRules gate.LendRules
	// reserveOffer offers the gate's idle permits to the permit server,
	// keeping reserveOfferKeep for its own calls.
	reserveOffer     bool
	reserveOfferKeep int
	// pod is $POD_NAME: the name the permit server counts borrows by.
	pod string
}

// reserveFlags returns the reserve's flags as parsed.
func (c config) reserveFlags() reserve.Flags {
	return reserve.Flags{
		Address: c.reserveAddress, Budget: c.reserveBudget, LendRules: c.lendRules,
		Offer: c.reserveOffer, OfferKeep: c.reserveOfferKeep,
	}
}

// parseConfig reads the command line; getenv supplies the namespace's
// default. With -h it returns flag.ErrHelp after writing the usage to usage.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (config, error) {
	c := config{pod: getenv(backpressure.EnvPodName)}
	var downstream string
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address to serve on")
	fs.StringVar(&downstream, "downstream", "", "base URL of the downstream; each inbound GET /?Q makes one GET <URL>/?Q call (required)")
	fs.StringVar(&c.gate, "gate", "", "the gate (DownstreamQuota name) to enforce on downstream calls (required)")
	c.Register(fs, getenv)
	fs.IntVar(&c.maxRetries, "max-retries", 0, "retries of a failed downstream call")
	fs.BoolVar(&c.retryOn429, "retry-on-429", false, "treat the downstream's 429 as retryable (reproduces the classic incident)")
	fs.IntVar(&c.inboundPermits, "inbound-permits", 4096, "the inbound gate's permits, protecting the process itself (no queue)")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address (default: off)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on the graceful shutdown after SIGTERM")
	var rf reserve.Flags
	rf.Register(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			fmt.Fprintln(usage, "Usage: gateway --downstream URL --gate NAME (--configmap NAME | --plan-dir DIR) [flags]")
			fs.PrintDefaults()
		}
		return config{}, err
	}
	c.reserveAddress, c.reserveBudget, c.lendRules = rf.Address, rf.Budget, rf.LendRules
	c.reserveOffer, c.reserveOfferKeep = rf.Offer, rf.OfferKeep
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	var errs []error
	if downstream == "" {
		errs = append(errs, errors.New("--downstream is required"))
	} else if u, err := url.Parse(downstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--downstream %q is not an http or https URL", downstream))
	} else {
		c.downstream = u
	}
	if c.gate == "" {
		errs = append(errs, errors.New("--gate is required"))
	}
	errs = append(errs, c.Check()...)
	if c.maxRetries < 0 {
		errs = append(errs, fmt.Errorf("--max-retries %d must be at least 0", c.maxRetries))
	}
	if c.inboundPermits < 1 || c.inboundPermits > gate.MaxPermits {
		errs = append(errs, fmt.Errorf("--inbound-permits %d must be in [1, %d]", c.inboundPermits, gate.MaxPermits))
	}
	errs = append(errs, rf.Check(c.pod)...)
	if c.shutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be positive", c.shutdownTimeout))
	}
	return c, errors.Join(errs...)
}
