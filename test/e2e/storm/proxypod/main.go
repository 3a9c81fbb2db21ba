//go:build unix

// Command proxypod is one pod of the storm's proxy variant: the pod of a
// service that does not use the library, with backpressure-proxy as its
// native sidecar. It takes examples/gateway's command line, as every pod of
// the storm does, and runs two processes, as the kubelet would run the
// pod's two containers:
//
//  1. backpressure-proxy, first, with one route to --downstream on --gate,
//     the plan source and acknowledgement flags given, and --metrics-listen;
//  2. once the route listens, examples/gateway with --downstream pointed at
//     the route, under a plan that never binds (its gate stands for no
//     limit at all: the proxy is the pod's only gate) and no retries (it
//     cannot tell the proxy's 503 from the downstream's, and a local
//     rejection must not be retried).
//
// Their log lines go to stderr, as the harness reads them from a pod: the
// proxy's "Applied plan" and "Serving metrics" (its gate is the pod's
// share), the gateway's "Serving" (its address is the pod's); the gateway's
// "Applied plan" is renamed "Applied application plan" and the proxy's
// "Serving" "Serving proxy route", so that neither is mistaken for the
// pod's. SIGTERM stops the gateway first, then the proxy, which drains and
// releases the pod's share: a native sidecar's order.
//
// Both binaries are found beside this one.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/internal/podmain"
)

// Log messages renamed so that the harness does not read them as the pod's.
const (
	msgProxyServing   = "Serving proxy route"
	msgAppApplied     = "Applied application plan"
	routeWaitTimeout  = 60 * time.Second
	stopTimeout       = 15 * time.Second
	unboundedPermits  = 100000
	applicationEpoch  = "application"
	applicationPlanID = 1
)

// config is examples/gateway's command line, as the harness gives it.
type config struct {
	listen, downstream, gate      string
	configMap, namespace, kubecfg string
	planDir, metricsListen        string
	acknowledge                   bool
	shutdownTimeout, deadline     time.Duration
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("proxypod", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", "the gateway's address")
	fs.StringVar(&c.downstream, "downstream", "", "the downstream's URL, the proxy's upstream")
	fs.StringVar(&c.gate, "gate", "", "the gate the proxy enforces")
	fs.StringVar(&c.configMap, "configmap", "", "passed to the proxy")
	fs.StringVar(&c.namespace, "namespace", "", "passed to the proxy")
	fs.StringVar(&c.kubecfg, "kubeconfig", "", "passed to the proxy")
	fs.StringVar(&c.planDir, "plan-dir", "", "passed to the proxy")
	fs.BoolVar(&c.acknowledge, "acknowledge", false, "passed to the proxy")
	fs.StringVar(&c.metricsListen, "metrics-listen", "", "the proxy's metrics address")
	// Two processes stop in turn within the pod's 30s grace period.
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "each process's shutdown bound")
	// The storm quota's deadline (manifests/quota.yaml): the gateway puts
	// it on every call, and the proxy's call ends with it.
	fs.DurationVar(&c.deadline, "deadline", 2*time.Second, "the per-call deadline of the gateway's plan")
	// The gateway's retry flags are accepted and not used; see the package
	// documentation.
	fs.IntVar(new(int), "max-retries", 0, "ignored: the application does not retry")
	fs.BoolVar(new(bool), "retry-on-429", false, "ignored: the application does not retry")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.downstream == "" || c.gate == "" {
		return c, errors.New("proxypod: --downstream and --gate are required")
	}
	return c, nil
}

func main() { podmain.Main(parse, run, "Proxy pod failed") }

// run starts the proxy and the gateway and stops them in order when ctx
// ends, or both as soon as either ends.
func run(ctx context.Context, c config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Dir(self)
	planDir, err := os.MkdirTemp("", "proxypod-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(planDir) }()
	if err := writeApplicationPlan(planDir, c); err != nil {
		return err
	}

	proxyArgs := []string{
		"--route", fmt.Sprintf("listen=127.0.0.1:0,gate=%s,upstream=%s", c.gate, c.downstream),
		"--metrics-listen", c.metricsListen, "--probe-listen", "", "--shutdown-timeout", c.shutdownTimeout.String(),
	}
	for flag, v := range map[string]string{"--configmap": c.configMap, "--namespace": c.namespace, "--kubeconfig": c.kubecfg, "--plan-dir": c.planDir} {
		if v != "" {
			proxyArgs = append(proxyArgs, flag, v)
		}
	}
	if c.acknowledge {
		proxyArgs = append(proxyArgs, "--acknowledge")
	}
	route := make(chan string, 1)
	proxy, proxyDone, err := start(filepath.Join(dir, "backpressure-proxy"), proxyArgs, nil, func(l map[string]any) {
		if l["msg"] == "Serving" && l["gate"] == c.gate {
			l["msg"] = msgProxyServing
			select {
			case route <- fmt.Sprint(l["address"]):
			default:
			}
		}
	})
	if err != nil {
		return err
	}
	var addr string
	select {
	case addr = <-route:
	case err := <-proxyDone:
		return fmt.Errorf("proxypod: the proxy exited before serving: %w", err)
	case <-time.After(routeWaitTimeout):
		_ = proxy.Process.Kill()
		return fmt.Errorf("proxypod: the proxy's route did not listen within %v", routeWaitTimeout)
	case <-ctx.Done():
		return stopInOrder(nil, nil, proxy, proxyDone)
	}

	gateway, gatewayDone, err := start(filepath.Join(dir, "gateway"), []string{
		"--listen", c.listen, "--downstream", "http://" + addr, "--gate", c.gate, "--plan-dir", planDir,
		"--max-retries", "0", "--shutdown-timeout", c.shutdownTimeout.String(),
	}, withoutPodName(os.Environ()), func(l map[string]any) {
		if l["msg"] == "Applied plan" {
			l["msg"] = msgAppApplied
		}
	})
	if err != nil {
		return errors.Join(err, stopInOrder(nil, nil, proxy, proxyDone))
	}
	select {
	case <-ctx.Done():
		return stopInOrder(gateway, gatewayDone, proxy, proxyDone)
	case err := <-gatewayDone:
		return errors.Join(fmt.Errorf("proxypod: the gateway exited: %w", err), stopInOrder(nil, nil, proxy, proxyDone))
	case err := <-proxyDone:
		return errors.Join(fmt.Errorf("proxypod: the proxy exited: %w", err), stopInOrder(gateway, gatewayDone, nil, nil))
	}
}

// writeApplicationPlan gives the gateway a gate that never binds.
func writeApplicationPlan(dir string, c config) error {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: c.gate, Epoch: applicationEpoch, Revision: applicationPlanID,
		Permits: unboundedPermits, DeadlineSeconds: c.deadline.Seconds(), Workers: 1,
	}
	d.Hash = plan.Hash(d)
	if err := plan.Validate(d); err != nil {
		return err
	}
	b, err := plan.Marshal(d)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, plan.KeyFor(c.gate)), b, 0o644)
}

// start runs a child, with env as its environment (nil: this process's),
// whose stderr JSON lines pass through edit on their way to this process's
// stderr; done receives Wait's result.
func start(path string, args, env []string, edit func(map[string]any)) (*exec.Cmd, <-chan error, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = os.Stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("proxypod: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		relay(stderr, edit)
		done <- cmd.Wait()
	}()
	return cmd, done, nil
}

// relay copies JSON lines, edited, and other lines as they are.
func relay(r io.Reader, edit func(map[string]any)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var l map[string]any
		if json.Unmarshal(line, &l) == nil {
			edit(l)
			if b, err := json.Marshal(l); err == nil {
				line = b
			}
		}
		_, _ = os.Stderr.Write(append(line, '\n'))
	}
	_, _ = io.Copy(io.Discard, r)
}

// stopInOrder sends SIGTERM to the gateway and waits for it, then to the
// proxy: the application stops before its sidecar.
func stopInOrder(gateway *exec.Cmd, gatewayDone <-chan error, proxy *exec.Cmd, proxyDone <-chan error) error {
	var errs []error
	for _, p := range []struct {
		cmd  *exec.Cmd
		done <-chan error
	}{{gateway, gatewayDone}, {proxy, proxyDone}} {
		if p.cmd == nil {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil {
				errs = append(errs, fmt.Errorf("proxypod: %s: %w", filepath.Base(p.cmd.Path), err))
			}
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("proxypod: %s did not stop within %v", filepath.Base(p.cmd.Path), stopTimeout))
		}
	}
	return errors.Join(errs...)
}

// withoutPodName returns env without the pod's name: the application does
// not know its pod, so the proxy beside it is the pod's one enforcer of the
// gate (the library claims a gate by pod name and refuses a second
// enforcer in the same pod).
func withoutPodName(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, backpressure.EnvPodName+"=")
	})
}
