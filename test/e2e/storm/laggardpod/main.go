//go:build unix

// Command laggardpod is the storm's laggard: one pod of examples/gateway
// whose plans reach it late, as a pod's do when the kubelet refreshes its
// mounted ConfigMap long after the ConfigMap changed. It takes
// examples/gateway's command line, reading the plans from a ConfigMap
// (--configmap, --namespace, --kubeconfig), and --apply-delay:
//
//  1. it reads the ConfigMap and writes its keys into a directory of its
//     own, at once, so that the gateway starts on the plan in force;
//  2. it runs examples/gateway, found beside it, with its command line as
//     given but --plan-dir on that directory instead of --configmap: the
//     gateway enforces, and with --acknowledge acknowledges, what the
//     directory holds;
//  3. it follows the ConfigMap and writes every later version of it into
//     the directory --apply-delay after the change arrived, in order,
//     while it goes on following.
//
// So the gateway applies every new plan, and acknowledges it, --apply-delay
// late, through the library's public API alone, and the operator must wait
// for it before it hands the laggard's capacity to other pods. The
// gateway's log lines pass through to stderr unchanged; SIGTERM is passed
// on to the gateway, whose exit ends this program.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/internal/podmain"
)

// config is the part of the command line this program reads; the rest is
// the gateway's.
type config struct {
	configMap, namespace, kubeconfig string
	delay                            time.Duration
	gatewayArgs                      []string
}

// parse splits args into this program's flags and the gateway's. The
// gateway keeps --kubeconfig, which it needs to acknowledge.
func parse(args []string) (config, error) {
	var c config
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		var dst *string
		switch name {
		case "configmap":
			dst = &c.configMap
		case "namespace":
			dst = &c.namespace
		case "kubeconfig":
			dst = &c.kubeconfig
		case "apply-delay":
			dst = new(string)
		default:
			c.gatewayArgs = append(c.gatewayArgs, args[i])
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return c, fmt.Errorf("laggardpod: --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		*dst = value
		switch name {
		case "kubeconfig":
			c.gatewayArgs = append(c.gatewayArgs, "--kubeconfig", value)
		case "apply-delay":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("laggardpod: --apply-delay %q must be a positive duration", value)
			}
			c.delay = d
		}
	}
	if c.configMap == "" || c.namespace == "" || c.kubeconfig == "" || c.delay == 0 {
		return c, errors.New("laggardpod: --configmap, --namespace, --kubeconfig and --apply-delay are required")
	}
	return c, nil
}

func main() { podmain.Main(parse, run, "Laggard pod failed") }

// run mirrors the ConfigMap into a directory, late, and runs the gateway
// on it until ctx ends or the gateway exits.
func run(ctx context.Context, c config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("laggardpod: kubeconfig: %w", err)
	}
	cfg.UserAgent = "backpressure-storm-laggard"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "laggardpod-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	mirrorCtx, stopMirror := context.WithCancel(context.Background())
	defer stopMirror()
	m := &mirror{dir: dir, delay: c.delay}
	mirrored, err := m.follow(mirrorCtx, client, c.namespace, c.configMap)
	if err != nil {
		return err
	}
	defer func() { stopMirror(); <-mirrored }()

	gateway := exec.Command(filepath.Join(filepath.Dir(self), "gateway"), append(c.gatewayArgs, "--plan-dir", dir)...)
	gateway.Stdout, gateway.Stderr = os.Stdout, os.Stderr
	if err := gateway.Start(); err != nil {
		return fmt.Errorf("laggardpod: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- gateway.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The gateway bounds its own shutdown (--shutdown-timeout).
		_ = gateway.Process.Signal(syscall.SIGTERM)
		return <-done
	}
}
