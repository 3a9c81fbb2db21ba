// Command backpressure-broker is the permit server: it holds a slice of
// the reserve of one or more downstreams' contracts and lends its permits,
// one call at a time, to pods whose own share is full (internal/broker,
// over the gRPC protocol api/reserve/v1).
//
//	backpressure-broker --gate logistics-api \
//	    --configmap search-gateway-backpressure --acknowledge \
//	    --listen-address :9443 --metrics-listen :8080 --max-lease 10s
//
// It runs as a Deployment of its own, not in the operator's manager: the
// calls of the application pods reach it, so it must neither wait for the
// manager's leader election nor restart with the manager's upgrades, and it
// needs no access to the API server beyond what its own share requires.
// When it is down or slow, pods go on with their own shares.
//
// With --gate, its slice of each quota's reserve is what the quota's
// published plan gives its pod ($POD_NAME), read as the library reads a
// pod's share (--configmap or --plan-dir, the flags of package
// sourceflags): a larger slice is lent at once; a smaller one lends
// nothing above it at once and, with --acknowledge, is acknowledged on the
// pod only once the leases outstanding fit in it, so that the operator
// moves the permits to another replica only then. A plan that does not
// name the pod gives it nothing. --capacity GATE=PERMITS instead fixes the
// slices, for a server run by hand.
//
// Pods may offer their own idle permits over the Offer stream: a borrow
// that finds the reserve lent out asks up to --offer-asks offering pods,
// each for at most --offer-ask-timeout, and is lent the first permit
// granted (internal/broker, Offers). A pod's offers reach only the
// replica its stream is connected to.
//
// A started server lends nothing for --max-lease (it waits out the leases
// an earlier run may have granted) and says so to borrowers; it
// acknowledges nothing meanwhile either. SIGTERM stops lending, waits (for
// at most --max-lease) until the leases have been returned or have
// expired, annotates the pod "<epoch>/released" with --acknowledge, then
// ends the Offer streams, lets the waiting borrows end and exits. Logs are JSON lines on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/backpressure-dev/backpressure-operator/internal/version"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil && cfg.version {
		fmt.Println("backpressure-broker", version.Get())
		return
	}
	if err == nil {
		// SIGTERM (from the kubelet) or Ctrl-C starts a graceful shutdown;
		// a second one ends the process at once.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		context.AfterFunc(ctx, stop)
		err = run(ctx, cfg, log, nil)
		stop()
	}
	if err != nil {
		log.Error("Broker failed", "err", strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down. ready, when not nil, is
// called with the server once it listens.
func run(ctx context.Context, cfg config, log *slog.Logger, ready func(*server)) error {
	s, err := newServer(ctx, cfg, log)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	return s.serve(ctx)
}
