// Command pods runs the pods of a cluster that has no kubelet, such as the
// local cluster of hack/dev-cluster.sh: it binds each pod to a node, marks
// it Running, and Ready once the library inside it holds its plans, and it
// acknowledges each pod's share as an application built with the library
// does (package pods says how). A deleted pod hands its share back and is
// deleted for good. Ctrl-C takes the pods out of Ready and hands their
// shares back; the pods stay.
//
// Usage (from the repository's root):
//
//	go run ./test/e2e/cmd/pods -n shop                   the pods of namespace shop
//	go run ./test/e2e/cmd/pods -A                        every namespace's
//	go run ./test/e2e/cmd/pods -n shop --acknowledge=false
//	                                                     pods whose library does not acknowledge
//
// It reads the kubeconfig as kubectl does: --kubeconfig, else $KUBECONFIG,
// else ~/.kube/config; without -n or -A, the namespace of its context.
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
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/pods"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pods:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("pods", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		namespace, selector, kubeconfig, node string
		all, acknowledge                      bool
		startDelay                            time.Duration
	)
	fs.StringVar(&namespace, "namespace", "", "namespace whose pods to run (default: the kubeconfig context's)")
	fs.StringVar(&namespace, "n", "", "short for --namespace")
	fs.BoolVar(&all, "all-namespaces", false, "run the pods of every namespace")
	fs.BoolVar(&all, "A", false, "short for --all-namespaces")
	fs.StringVar(&selector, "selector", "", "run only the pods this label selector picks")
	fs.StringVar(&selector, "l", "", "short for --selector")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&node, "node", pods.DefaultNode, "the node the pods run on, registered if it does not exist")
	fs.BoolVar(&acknowledge, "acknowledge", true, "acknowledge each pod's share as the library does with Options.Ack; false leaves the operator to wait the quota's unacknowledgedDelay")
	fs.DurationVar(&startDelay, "start-delay", time.Second, "time from a pod's creation to its container starting")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if startDelay < 0 {
		return fmt.Errorf("--start-delay %v: must not be negative", startDelay)
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return fmt.Errorf("--selector %q: %w", selector, err)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return err
	}
	// One client plays every pod's kubelet and library at once: client-go's
	// default of 5 requests a second would hold a scale-up's pods back.
	cfg.QPS, cfg.Burst = 100, 200
	switch {
	case all && namespace != "":
		return errors.New("give either --namespace or --all-namespaces")
	case all:
	case namespace == "":
		if namespace, _, err = loader.Namespace(); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return pods.Run(ctx, pods.Options{
		Config:      cfg,
		Namespace:   namespace,
		Selector:    sel,
		Node:        node,
		StartDelay:  startDelay,
		Acknowledge: acknowledge,
		Log:         log,
	})
}
