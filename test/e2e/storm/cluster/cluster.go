//go:build unix

package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// Options configure a Cluster.
type Options struct {
	// OutDir receives the kubeconfigs, certificates and logs.
	OutDir string
	// CRDs, when set, is a directory of CustomResourceDefinitions that
	// kubectl applies, as a user installs them, once the API server runs.
	CRDs string
	// Logf reports progress; nil discards it.
	Logf func(format string, args ...any)
}

// Cluster is a control plane with no node process: kube-apiserver with the
// aggregation layer, etcd and kube-controller-manager, the custom metrics
// API the HPA controller reads, and the processes started on it (the
// operator's manager, the pods the kubelet of Workload runs). It is what
// every scenario of the storm shares.
type Cluster struct {
	// OutDir is as in Options.
	OutDir string
	// Client talks to the API server.
	Client client.WithWatch
	// Config is the API server's admin config.
	Config *rest.Config
	// Kubeconfig is the admin kubeconfig's path, for the processes started
	// on the cluster.
	Kubeconfig string
	// Metrics is the custom metrics API the HPA controller reads.
	Metrics *MetricsAPI

	logf    func(string, ...any)
	env     *envtest.Environment
	kubectl *testenv.Kubectl
	procs   *Processes
	kcm     *Process
	// manager and managerPath: see manager.go.
	manager     *Process
	managerPath string
	// certDir is the API server's certificate directory (apiserver.go).
	certDir string
}

// Start starts the control plane, applies opts.CRDs with kubectl, serves
// the custom metrics API through the aggregation layer and starts
// kube-controller-manager. The control plane's binaries must be built
// (hack/setup-envtest.sh; KUBEBUILDER_ASSETS or its cache). On error
// everything started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	c = &Cluster{OutDir: opts.OutDir, logf: opts.Logf, procs: &Processes{}}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(c.OutDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()

	c.logf("Starting kube-apiserver and etcd")
	if c.env, err = testenv.New(); err != nil {
		return c, err
	}
	// The CRDs are applied with kubectl below, as a user installs them.
	c.env.CRDDirectoryPaths, c.env.ErrorIfCRDPathMissing = nil, false
	// Certificates that outlive a restart of the API server (apiserver.go).
	if err := c.keepAPIServerCerts(); err != nil {
		return c, err
	}
	pki, err := configureAggregation(c.env, c.OutDir)
	if err != nil {
		return c, err
	}
	cfg, err := c.env.Start()
	if err != nil {
		return c, fmt.Errorf("storm: start control plane: %w", err)
	}
	// The harness's client plays the scheduler, every pod's kubelet and
	// the observers at once: client-go's default limit (5 requests a
	// second) would delay a pod's Ready status by seconds during a scale
	// step.
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	scheme, err := testenv.Scheme()
	if err != nil {
		return c, err
	}
	if c.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return c, err
	}
	if c.kubectl, err = testenv.NewKubectl(c.env, c.OutDir); err != nil {
		return c, err
	}
	c.Kubeconfig = c.kubectl.Kubeconfig

	if opts.CRDs != "" {
		c.logf("Applying the CRDs with kubectl")
		if err := c.Kubectl("apply", "-f", opts.CRDs); err != nil {
			return c, err
		}
		if err := c.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
			return c, err
		}
	}

	c.logf("Serving the custom metrics API through the aggregation layer")
	if c.Metrics, err = StartMetricsAPI(pki); err != nil {
		return c, err
	}
	if err := RegisterMetricsAPI(ctx, c.Client, c.Metrics, pki); err != nil {
		return c, err
	}

	c.logf("Starting kube-controller-manager (%s)", strings.Join(Controllers, ", "))
	if c.kcm, err = StartControllerManager(c.env, c.procs, c.OutDir); err != nil {
		return c, err
	}
	return c, nil
}

// Kubectl runs kubectl, and returns an error with its stderr when it fails.
func (c *Cluster) Kubectl(args ...string) error {
	_, stderr, err := c.kubectl.Run(args...)
	if err != nil {
		return fmt.Errorf("storm: kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return nil
}

// StartProcess starts a process on the cluster's node; Close stops it if
// it still runs then.
func (c *Cluster) StartProcess(spec ProcessSpec) (*Process, error) { return c.procs.Start(spec) }

// ControllersErr returns an error when kube-controller-manager has exited.
func (c *Cluster) ControllersErr() error {
	if c.kcm == nil {
		return nil
	}
	select {
	case <-c.kcm.Done():
		return fmt.Errorf("storm: kube-controller-manager exited: %w; its last lines:\n%s", c.kcm.Exited(), c.kcm.Tail())
	default:
		return nil
	}
}

// Close stops every process started on the cluster, the manager
// gracefully, and the control plane.
func (c *Cluster) Close() {
	if c.manager != nil {
		if err := c.manager.Terminate(10 * time.Second); err != nil {
			c.logf("Stopping the manager: %v", err)
		}
	}
	c.procs.StopAll()
	if c.Metrics != nil {
		_ = c.Metrics.Close()
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			c.logf("Stopping the control plane failed: %v", err)
		}
	}
	c.removeAPIServerCerts()
}

// WaitFor polls cond every 50ms until it is true, returns an error, or
// timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("storm: %s: not within %v", what, timeout)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
