// Package testenv starts the real control plane that the project's tests run
// against: kube-apiserver and etcd built by hack/setup-envtest.sh, with the
// project's CRDs installed, and the kubectl built beside them.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// AssetsEnv is the environment variable that names the directory holding
// kube-apiserver, etcd and kubectl.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// rootModule is the module path of the repository's root go.mod.
const rootModule = "github.com/backpressure-dev/backpressure-operator"

// RepoRoot returns the directory of the repository's root go.mod, found by
// walking up from the working directory, which for a test is its package
// directory. The go.mod files of the nested modules (the library, the plan
// document, the library's API server tests) are passed over.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(data) == rootModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: no go.mod of " + rootModule + " above the working directory")
		}
		dir = parent
	}
}

// modulePath returns the path on the module line of a go.mod file.
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// Assets returns the directory holding the control-plane binaries. It uses
// KUBEBUILDER_ASSETS when set, and otherwise the cache of
// hack/setup-envtest.sh when that build is complete. It never builds: a
// ten-minute build inside a test would outlive the test's timeout.
func Assets() (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		return dir, checkAssets(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "setup-envtest.sh"), "--print").Output()
	if err != nil {
		return "", fmt.Errorf("testenv: hack/setup-envtest.sh --print: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if err := checkAssets(dir); err != nil {
		return "", fmt.Errorf("%w; run `make test`, or export %s=$(hack/setup-envtest.sh)", err, AssetsEnv)
	}
	return dir, nil
}

func checkAssets(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("testenv: control plane not built in %s: %w", dir, err)
		}
	}
	return nil
}

// New returns an envtest environment that installs the project's CRDs from
// config/crd/bases, with the binaries from Assets. The caller starts and
// stops it.
func New() (*envtest.Environment, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// envtest's 20 s default is short for a kube-apiserver starting on
		// two cores busy with other suites; a slow start is not a failure.
		ControlPlaneStartTimeout: 90 * time.Second,
	}, nil
}

// Start starts a control plane for one test, with the project's CRDs, and
// stops it when the test ends. A test that needs it fails, saying how to
// build the control plane, rather than skips when it cannot start. It
// returns the environment (for its kubeconfig and kubectl) and an admin
// config.
func Start(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env, err := New()
	if err != nil {
		t.Fatalf("%v (build the control plane with hack/setup-envtest.sh)", err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	return env, cfg
}

// Scheme returns a scheme of client-go's kinds and the project's API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewClient returns an admin client for cfg that knows client-go's kinds
// and the project's API, failing the test on error.
func NewClient(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Kubectl runs the kubectl built beside the control plane against a running
// environment, as a user would.
type Kubectl struct {
	// Path is the kubectl binary.
	Path string
	// Kubeconfig is the file kubectl reads.
	Kubeconfig string
}

// WriteKubeconfig writes the started environment's kubeconfig, its admin
// user's, into dir and returns the file's path, for programs the test runs
// as a user would.
func WriteKubeconfig(env *envtest.Environment, dir string) (string, error) {
	if len(env.KubeConfig) == 0 {
		return "", errors.New("testenv: the environment is not started")
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, env.KubeConfig, 0o600)
}

// NewKubectl writes the environment's kubeconfig into dir and returns a
// Kubectl that uses it.
func NewKubectl(env *envtest.Environment, dir string) (*Kubectl, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	path, err := WriteKubeconfig(env, dir)
	if err != nil {
		return nil, err
	}
	return &Kubectl{Path: filepath.Join(assets, "kubectl"), Kubeconfig: path}, nil
}

// Run runs kubectl with args and returns its stdout and stderr; err is
// non-nil when it exits non-zero.
func (k *Kubectl) Run(args ...string) (stdout, stderr string, err error) {
	var outBuf, errBuf strings.Builder
	cmd := exec.Command(k.Path, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	err = cmd.Run()
	return outBuf.String(), errBuf.String(), err
}

// Shared is one control plane for all the tests of a test binary: the first
// test that needs it starts it, each test works in a namespace of its own,
// and TestMain stops it. The zero value is ready to use.
type Shared struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
	seq  atomic.Int64
}

// Config returns an admin config for the control plane, starting it on
// first use. A test that needs it fails, rather than skips, when it cannot
// run.
func (s *Shared) Config(t testing.TB) *rest.Config {
	t.Helper()
	s.once.Do(func() {
		if s.env, s.err = New(); s.err == nil {
			s.cfg, s.err = s.env.Start()
		}
	})
	if s.err != nil {
		t.Fatalf("%v (build the control plane with hack/setup-envtest.sh)", s.err)
	}
	return rest.CopyConfig(s.cfg)
}

// Namespace creates a fresh namespace, prefix-N, with the default service
// account that pod admission looks for, and returns an admin client and
// its name.
func (s *Shared) Namespace(t testing.TB, prefix string) (kubernetes.Interface, string) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(s.Config(t))
	ns := fmt.Sprintf("%s-%d", prefix, s.seq.Add(1))
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client, ns
}

// Main runs a package's tests, stops the control plane if one of them
// started it, and exits with the tests' code: the whole TestMain of a
// package whose tests share s.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

// Stop stops the control plane if a test started it.
func (s *Shared) Stop() error {
	if s.env == nil {
		return nil
	}
	return s.env.Stop()
}
