//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// ManagerNamespace is where the manager keeps its leader-election lease.
const ManagerNamespace = "backpressure-system"

// Options configure a Harness.
type Options struct {
	// Root is the repository's root; empty means testenv.RepoRoot().
	Root string
	// OutDir receives the binaries, kubeconfig, manifests, plans and logs;
	// empty means <Root>/_output/storm.
	OutDir string
	// Logf reports progress; nil discards it.
	Logf func(format string, args ...any)
}

// Harness is what the variants share: the control plane (kube-apiserver
// with the aggregation layer, etcd and kube-controller-manager) with the
// CRDs applied, the custom metrics API the HPA controller reads, the built
// binaries, and the operator's manager running as a process against the
// control plane, as `make run` would run it.
type Harness struct {
	// Root and OutDir are as in Options, resolved.
	Root   string
	OutDir string
	// Client talks to the API server.
	Client client.WithWatch
	// Config is the API server's admin config.
	Config *rest.Config
	// Metrics is the custom metrics API the HPA controller reads.
	Metrics *MetricsAPI
	// Kubectl runs the kubectl built beside the control plane.
	Kubectl *testenv.Kubectl

	logf    func(string, ...any)
	env     *envtest.Environment
	procs   *Processes
	manager *Process
	kcm     *Process
	gateway string
	// proxyPod runs a pod of a Sidecar variant.
	proxyPod string
	// laggardPod runs the laggard of a variant that has one.
	laggardPod string

	// certDir is the API server's certificate directory (faults_apiserver.go).
	certDir string
}

// Setup builds the manager and examples/gateway, starts the control plane,
// applies the CRDs with kubectl and starts the manager. The control plane's
// binaries must be built (hack/setup-envtest.sh; KUBEBUILDER_ASSETS or its
// cache). On error everything started is stopped again.
func Setup(ctx context.Context, opts Options) (h *Harness, err error) {
	h = &Harness{Root: opts.Root, OutDir: opts.OutDir, logf: opts.Logf, procs: &Processes{}}
	if h.logf == nil {
		h.logf = func(string, ...any) {}
	}
	if h.Root == "" {
		if h.Root, err = testenv.RepoRoot(); err != nil {
			return nil, err
		}
	}
	if h.OutDir == "" {
		h.OutDir = filepath.Join(h.Root, "_output", "storm")
	}
	if err := os.MkdirAll(h.OutDir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
			h = nil
		}
	}()

	bin := filepath.Join(h.OutDir, "bin")
	h.logf("Building the manager and examples/gateway into %s", bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./cmd/manager", "./examples/gateway",
		"./cmd/backpressure-proxy", "./test/e2e/storm/proxypod", "./test/e2e/storm/laggardpod")
	build.Dir = h.Root
	if out, err := build.CombinedOutput(); err != nil {
		return h, fmt.Errorf("storm: go build: %w\n%s", err, out)
	}
	h.gateway = filepath.Join(bin, "gateway")
	h.proxyPod = filepath.Join(bin, "proxypod")
	h.laggardPod = filepath.Join(bin, "laggardpod")

	h.logf("Starting kube-apiserver and etcd")
	if h.env, err = testenv.New(); err != nil {
		return h, err
	}
	// The CRDs are applied with kubectl below, as a user installs them.
	h.env.CRDDirectoryPaths, h.env.ErrorIfCRDPathMissing = nil, false
	// Fault hook (faults_apiserver.go): certificates that outlive a restart
	// of the API server.
	if err := h.keepAPIServerCerts(); err != nil {
		return h, err
	}
	pki, err := configureAggregation(h.env, h.OutDir)
	if err != nil {
		return h, err
	}
	cfg, err := h.env.Start()
	if err != nil {
		return h, fmt.Errorf("storm: start control plane: %w", err)
	}
	// The harness's client plays the scheduler, every pod's kubelet and
	// the observers at once: client-go's default limit (5 requests a
	// second) would delay a pod's Ready status by seconds during a scale
	// step.
	cfg.QPS, cfg.Burst = 200, 400
	h.Config = cfg
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return h, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return h, err
	}
	if h.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return h, err
	}
	if h.Kubectl, err = testenv.NewKubectl(h.env, h.OutDir); err != nil {
		return h, err
	}

	h.logf("Applying the CRDs with kubectl")
	if err := h.kubectl("apply", "-f", filepath.Join(h.Root, "config", "crd", "bases")); err != nil {
		return h, err
	}
	if err := h.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/downstreamquotas.backpressure.dev"); err != nil {
		return h, err
	}
	if err := h.kubectl("create", "namespace", ManagerNamespace); err != nil {
		return h, err
	}

	h.logf("Serving the custom metrics API through the aggregation layer")
	if h.Metrics, err = StartMetricsAPI(pki); err != nil {
		return h, err
	}
	if err := RegisterMetricsAPI(ctx, h.Client, h.Metrics, pki); err != nil {
		return h, err
	}

	h.logf("Starting kube-controller-manager (%s)", strings.Join(Controllers, ", "))
	if h.kcm, err = StartControllerManager(ctx, h.env, h.Client, h.procs, h.OutDir); err != nil {
		return h, err
	}

	h.logf("Starting the manager")
	if h.manager, err = h.procs.Start(ProcessSpec{
		Name:    "manager",
		Path:    filepath.Join(bin, "manager"),
		Args:    ManagerArgs(h.Kubectl.Kubeconfig),
		LogPath: filepath.Join(h.OutDir, "manager.log"),
	}); err != nil {
		return h, err
	}
	return h, nil
}

// ManagerArgs are the manager's flags: the control plane's kubeconfig,
// leader election on, and no metrics or health listeners, which the
// scenario does not use and which would need free ports.
func ManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--leader-elect",
		"--leader-election-namespace", ManagerNamespace,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}
}

// kubectl runs kubectl, and returns an error with its stderr when it fails.
func (h *Harness) kubectl(args ...string) error {
	_, stderr, err := h.Kubectl.Run(args...)
	if err != nil {
		return fmt.Errorf("storm: kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return nil
}

// ManagerErr returns an error when the manager has exited.
func (h *Harness) ManagerErr() error {
	if h.manager == nil {
		return nil
	}
	select {
	case <-h.manager.Done():
		return h.manager.Exited()
	default:
		return nil
	}
}

// ControllersErr returns an error when kube-controller-manager has exited.
func (h *Harness) ControllersErr() error {
	if h.kcm == nil {
		return nil
	}
	select {
	case <-h.kcm.Done():
		return fmt.Errorf("storm: kube-controller-manager exited: %w; its last lines:\n%s", h.kcm.Exited(), h.kcm.Tail())
	default:
		return nil
	}
}

// Close stops every process the harness started, the manager gracefully,
// and the control plane.
func (h *Harness) Close() {
	if h.manager != nil {
		if err := h.manager.Terminate(10 * time.Second); err != nil {
			h.logf("Stopping the manager: %v", err)
		}
	}
	h.procs.StopAll()
	if h.Metrics != nil {
		_ = h.Metrics.Close()
	}
	if h.env != nil {
		if err := h.env.Stop(); err != nil {
			h.logf("Stopping the control plane failed: %v", err)
		}
	}
	h.removeAPIServerCerts()
}

// waitFor polls cond every 50ms until it is true, returns an error, or
// timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
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
