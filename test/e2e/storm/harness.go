//go:build unix

package storm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

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

// Harness is what the scenarios share: the cluster (the control plane with
// the aggregation layer, kube-controller-manager and the custom metrics API
// the HPA controller reads) with the CRDs applied, the built binaries, and
// the operator's manager running as a process against the cluster, as
// `make run` would run it.
type Harness struct {
	*cluster.Cluster
	// Root is as in Options, resolved.
	Root string

	logf    func(string, ...any)
	gateway string
	// proxyPod runs a pod of a Sidecar variant.
	proxyPod string
	// laggardPod runs the laggard of a variant that has one.
	laggardPod string
	// broker is cmd/backpressure-broker, the permit server of a quota's
	// reserve.
	broker string
}

// Setup builds the manager, examples/gateway and the permit server, starts the cluster,
// applies the CRDs with kubectl and starts the manager. The control plane's
// binaries must be built (hack/setup-envtest.sh; KUBEBUILDER_ASSETS or its
// cache). On error everything started is stopped again.
func Setup(ctx context.Context, opts Options) (*Harness, error) {
	h := &Harness{Root: opts.Root, logf: opts.Logf}
	if h.logf == nil {
		h.logf = func(string, ...any) {}
	}
	if h.Root == "" {
		root, err := testenv.RepoRoot()
		if err != nil {
			return nil, err
		}
		h.Root = root
	}
	outDir := opts.OutDir
	if outDir == "" {
		outDir = filepath.Join(h.Root, "_output", "storm")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}

	bin := filepath.Join(outDir, "bin")
	h.logf("Building the manager and examples/gateway into %s", bin)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./cmd/manager", "./examples/gateway",
		"./cmd/backpressure-proxy", "./cmd/backpressure-broker", "./test/e2e/storm/proxypod", "./test/e2e/storm/laggardpod")
	build.Dir = h.Root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("storm: go build: %w\n%s", err, out)
	}
	h.gateway = filepath.Join(bin, "gateway")
	h.proxyPod = filepath.Join(bin, "proxypod")
	h.laggardPod = filepath.Join(bin, "laggardpod")
	h.broker = filepath.Join(bin, "backpressure-broker")

	c, err := cluster.Start(ctx, cluster.Options{OutDir: outDir, CRDs: filepath.Join(h.Root, "config", "crd", "bases"), Logf: h.logf})
	if err != nil {
		return nil, err
	}
	h.Cluster = c
	if err := c.StartManager(ctx, filepath.Join(bin, "manager")); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}
