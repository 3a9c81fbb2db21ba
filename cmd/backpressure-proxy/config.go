package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/reserve"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/sourceflags"
)

// config is the command line.
type config struct {
	routes            []route
	forwardListen     string
	forwardHosts      map[string]string // lower-case host or host:port → gate
	sourceflags.Flags                   // where the plans come from, and acknowledgement
	metricsListen     string
	probeListen       string
	// listenAnywhere lets --route and --forward-listen bind addresses
	// other than loopback.
	listenAnywhere bool
	// maxCallDuration bounds one call's request and response on the
	// application's side; zero derives it from the plan's deadline.
	maxCallDuration time.Duration
	shutdownTimeout time.Duration
	version         bool
	// reserveAddress is the permit server to borrow from; "" for none.
	reserveAddress string
	reserveBudget  time.Duration
	lendRules      gate.LendRules
	// reserveOffer offers the gates' idle permits to the permit server,
	// each keeping reserveOfferKeep for its own calls.
	reserveOffer     bool
	reserveOfferKeep int
	// pod is $POD_NAME, the borrower's name to the permit server.
	pod string
}

// reserveFlags returns the reserve's flags as parsed.
func (c config) reserveFlags() reserve.Flags {
	return reserve.Flags{
		Address: c.reserveAddress, Budget: c.reserveBudget, LendRules: c.lendRules,
		Offer: c.reserveOffer, OfferKeep: c.reserveOfferKeep,
	}
}

// route is one local port standing for one downstream.
type route struct {
	listen   string
	gate     string
	upstream *url.URL
}

// gates returns every gate the routes and forwarded hosts name, sorted and
// without repeats: the gates the proxy cannot start without.
func (c config) gates() []string {
	var gs []string
	for _, r := range c.routes {
		gs = append(gs, r.gate)
	}
	for _, g := range c.forwardHosts {
		gs = append(gs, g)
	}
	slices.Sort(gs)
	return slices.Compact(gs)
}

// routeFlag collects --route values.
type routeFlag struct{ routes *[]route }

func (f routeFlag) String() string { return "" }

// Set parses listen=ADDR,gate=NAME,upstream=URL.
func (f routeFlag) Set(s string) error {
	var r route
	var upstream string
	for field := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", field)
		}
		switch k {
		case "listen":
			r.listen = v
		case "gate":
			r.gate = v
		case "upstream":
			upstream = v
		default:
			return fmt.Errorf("unknown key %q (want listen, gate, upstream)", k)
		}
	}
	var errs []error
	if _, _, err := net.SplitHostPort(r.listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q is not host:port", r.listen))
	}
	if r.gate == "" {
		errs = append(errs, errors.New("gate is required"))
	}
	u, err := url.Parse(upstream)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("upstream %q is not an http or https URL", upstream))
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		errs = append(errs, fmt.Errorf("upstream %q must be scheme://host[:port][/path], without user, query or fragment", upstream))
	default:
		r.upstream = u
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	*f.routes = append(*f.routes, r)
	return nil
}

// hostFlag collects --forward-host values.
type hostFlag struct{ hosts map[string]string }

func (f hostFlag) String() string { return "" }

// Set parses HOST[:PORT]=GATE.
func (f hostFlag) Set(s string) error {
	host, g, ok := strings.Cut(s, "=")
	if !ok || host == "" || g == "" {
		return fmt.Errorf("%q is not HOST[:PORT]=GATE", s)
	}
	if strings.ContainsAny(host, "/@ ") {
		return fmt.Errorf("host %q must be a host name or host:port", host)
	}
	host = strings.ToLower(host)
	if prev, dup := f.hosts[host]; dup && prev != g {
		return fmt.Errorf("host %q is mapped to both %q and %q", host, prev, g)
	}
	f.hosts[host] = g
	return nil
}

// parseConfig reads the command line; getenv supplies the namespace's
// default. With -h it returns flag.ErrHelp after writing the usage to usage.
func parseConfig(args []string, getenv func(string) string, usage io.Writer) (config, error) {
	c := config{forwardHosts: map[string]string{}}
	fs := flag.NewFlagSet("backpressure-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(routeFlag{&c.routes}, "route", "a local port standing for one downstream: listen=127.0.0.1:PORT,gate=NAME,upstream=URL (repeatable)")
	fs.StringVar(&c.forwardListen, "forward-listen", "", "serve HTTP_PROXY-style forwarding (absolute-form requests) on this address; CONNECT is declined")
	fs.Var(hostFlag{c.forwardHosts}, "forward-host", "a host the forwarding port admits, and its gate: HOST[:PORT]=GATE (repeatable); other hosts are refused with 403")
	c.Register(fs, getenv)
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9090", "serve /metrics on this address (empty: off); loopback by default, \":9090\" for a scraper outside the pod")
	fs.StringVar(&c.probeListen, "probe-listen", ":9091", "serve /healthz and /readyz, and nothing else, on this address for the kubelet's probes (empty: off)")
	fs.BoolVar(&c.listenAnywhere, "listen-non-loopback", false, "let --route and --forward-listen listen on addresses other than loopback, where other pods can reach them; off: only 127.0.0.0/8, ::1 or localhost")
	fs.DurationVar(&c.maxCallDuration, "max-call-duration", 0, "the longest one call may take on the application's side, its request body and its whole answer, an upgraded connection included; 0: twice the plan's deadline (20s without one)")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 30*time.Second, "bound on the graceful shutdown after SIGTERM: calls in flight finish, then the shares are released")
	var rf reserve.Flags
	rf.Register(fs)
	// The proxy gives every call a deadline, which bounds its lease.
	fs.Lookup("reserve-address").Usage += "; every call then gets the plan's deadline"
	c.pod = getenv(backpressure.EnvPodName)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			fmt.Fprintln(usage, "Usage: backpressure-proxy (--route ... | --forward-listen ADDR --forward-host HOST=GATE ...) (--configmap NAME | --plan-dir DIR) [flags]")
			fs.PrintDefaults()
		}
		return config{}, err
	}
	c.reserveAddress, c.reserveBudget, c.lendRules = rf.Address, rf.Budget, rf.LendRules
	c.reserveOffer, c.reserveOfferKeep = rf.Offer, rf.OfferKeep
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	if c.version {
		return c, nil
	}
	var errs []error
	if len(c.routes) == 0 && c.forwardListen == "" {
		errs = append(errs, errors.New("at least one --route or --forward-listen is required"))
	}
	if (c.forwardListen == "") != (len(c.forwardHosts) == 0) {
		errs = append(errs, errors.New("--forward-listen and --forward-host go together"))
	}
	listens := map[string]bool{}
	for _, l := range append(routeListens(c.routes), c.forwardListen) {
		if l == "" {
			continue
		}
		if listens[l] && !strings.HasSuffix(l, ":0") {
			errs = append(errs, fmt.Errorf("listen address %q is used twice", l))
		}
		listens[l] = true
		if !c.listenAnywhere && !loopback(l) {
			errs = append(errs, fmt.Errorf("listen address %q is not loopback: other pods could send calls through this pod's share; "+
				"listen on 127.0.0.1, or give --listen-non-loopback", l))
		}
	}
	if c.maxCallDuration < 0 {
		errs = append(errs, fmt.Errorf("--max-call-duration %v must not be negative", c.maxCallDuration))
	}
	errs = append(errs, c.Check()...)
	errs = append(errs, rf.Check(c.pod)...)
	if c.shutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--shutdown-timeout %v must be positive", c.shutdownTimeout))
	}
	return c, errors.Join(errs...)
}

// loopback reports whether the listen address hostport binds loopback
// only: an IP in 127.0.0.0/8, ::1, or localhost. An empty host binds every
// interface.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func routeListens(rs []route) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.listen
	}
	return out
}
