package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

const (
	// operatorNamespace is where config/default installs the manager.
	operatorNamespace = "backpressure-system"
	// operatorServiceAccount is the manager's ServiceAccount there.
	operatorServiceAccount = "backpressure-operator"
	// releaseName is the Helm release the chart tests render; with it the
	// chart's object names match config/default's where they can.
	releaseName = "backpressure-operator"
	// kubeVersion is the Kubernetes version Helm renders for: the control
	// plane's (hack/setup-envtest.sh).
	kubeVersion = "1.37.2"
	// chartDir is the chart, relative to the repository root.
	chartDir = "charts/backpressure-operator"
)

// repoRoot is the repository's root directory.
var repoRoot string

// plane is the control plane shared by the tests that need one; it starts
// on first use.
var plane struct {
	once    sync.Once
	env     *envtest.Environment
	cfg     *rest.Config
	kubectl *testenv.Kubectl
	dir     string
	err     error
}

func TestMain(m *testing.M) {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	repoRoot = root
	code := m.Run()
	if plane.env != nil {
		if err := plane.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the control plane:", err)
		}
	}
	if plane.dir != "" {
		_ = os.RemoveAll(plane.dir)
	}
	os.Exit(code)
}

// controlPlane returns the running API server's admin config and a kubectl
// for it, starting them on first use. Besides the project's CRDs it serves
// the Prometheus Operator's ServiceMonitor and PrometheusRule, which the
// monitoring manifests create.
func controlPlane(t *testing.T) (*rest.Config, *testenv.Kubectl) {
	t.Helper()
	plane.once.Do(func() {
		env, err := testenv.New()
		if err != nil {
			plane.err = err
			return
		}
		env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, filepath.Join(repoRoot, "test", "manifests", "testdata", "crds"))
		cfg, err := env.Start()
		if err != nil {
			plane.err = fmt.Errorf("start the control plane: %w", err)
			return
		}
		plane.env, plane.cfg = env, cfg
		if plane.dir, err = os.MkdirTemp("", "manifests-kubectl-"); err != nil {
			plane.err = err
			return
		}
		plane.kubectl, plane.err = testenv.NewKubectl(env, plane.dir)
	})
	if plane.err != nil {
		t.Fatal(plane.err)
	}
	return rest.CopyConfig(plane.cfg), plane.kubectl
}

// scheme knows the built-in kinds and the project's API (testenv.Scheme).
func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kubectlBinary is the kubectl built beside the control plane; kustomize is
// built into it, so rendering needs no running API server.
func kubectlBinary(t *testing.T) string {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(assets, "kubectl")
}

// run runs a command in the repository root and returns its stdout; it
// fails the test, with stderr, when the command fails.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runErr runs a command in the repository root and returns its stdout, and
// an error carrying stderr when it fails.
func runErr(name string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// tool runs a tool pinned in hack/tools/<name>/go.mod.
func tool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	return run(t, "go", toolArgs(name, args...)...)
}

func toolArgs(name string, args ...string) []string {
	return append([]string{"tool", "-modfile=" + filepath.Join("hack", "tools", name, "go.mod"), name}, args...)
}

// kustomize renders the kustomization in dir (absolute, or relative to the
// repository root).
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	return run(t, kubectlBinary(t), "kustomize", dir)
}

// kustomizeWithMonitoring renders config/default with the config/certmanager
// and config/prometheus components enabled the way its kustomization.yaml
// tells users to: by uncommenting the component lines, here in a copy of
// config/.
func kustomizeWithMonitoring(t *testing.T) []byte {
	t.Helper()
	return kustomizeUncommented(t, "default", "#components:\n#- ../certmanager\n#- ../prometheus\n")
}

// kustomizeWithReserve renders config/samples with its reserve component
// (config/samples/reserve) enabled the way its kustomization.yaml tells
// users to: by uncommenting the component lines.
func kustomizeWithReserve(t *testing.T) []byte {
	t.Helper()
	return kustomizeUncommented(t, "samples", "#components:\n#- reserve\n")
}

// kustomizeUncommented renders config/<dir> with the lines commented,
// which its kustomization.yaml holds commented out, uncommented, in a copy
// of config/.
func kustomizeUncommented(t *testing.T, dir, commented string) []byte {
	t.Helper()
	tmp := t.TempDir()
	if err := os.CopyFS(filepath.Join(tmp, "config"), os.DirFS(filepath.Join(repoRoot, "config"))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tmp, "config", dir, "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(commented)) {
		t.Fatalf("config/%s/kustomization.yaml no longer holds the lines its comment tells users to uncomment:\n%s", dir, commented)
	}
	enabled := strings.ReplaceAll(commented, "#", "")
	if err := os.WriteFile(path, bytes.Replace(data, []byte(commented), []byte(enabled), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, filepath.Join(tmp, "config", dir))
}

// helmTemplate renders the chart as release releaseName in
// operatorNamespace, CRDs included, with the given --set values.
func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	return helmTemplateIn(t, operatorNamespace, set...)
}

// helmTemplateIn renders the chart as release releaseName in namespace.
func helmTemplateIn(t *testing.T, namespace string, set ...string) []byte {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", namespace,
		"--kube-version", kubeVersion, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return tool(t, "helm", args...)
}

// decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode the rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the objects of kind.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of kind, failing the test unless there is
// exactly one.
func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("want exactly one %s, got %d", kind, len(found))
	}
	return found[0]
}

// readRepoFile reads a file relative to the repository root.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// repoFiles lists the regular files under dir, relative to it.
func repoFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := fs.WalkDir(os.DirFS(filepath.Join(repoRoot, dir)), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
