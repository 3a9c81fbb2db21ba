package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// The release the test builds. A pre-release version checks that the
// version reaches the chart (whose version drops the v) and krew intact.
const (
	version      = "v1.2.3-rc.1"
	chartVersion = "1.2.3-rc.1"
	commit       = "0123456789abcdef0123456789abcdef01234567"
	image        = "registry.example.com/platform/backpressure-operator"
	releaseURL   = "https://downloads.example.com/backpressure/v1.2.3-rc.1"
	plugin       = "kubectl-backpressure"
	manager      = "manager"
	proxy        = "backpressure-proxy"
	broker       = "backpressure-broker"
	// kubeVersion is the Kubernetes version Helm renders for: the control
	// plane's (hack/setup-envtest.sh).
	kubeVersion = "1.37.2"
)

// platform is a GOOS/GOARCH pair of the release.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// archiveName is the file name hack/release.sh gives the archive of bin.
func (p platform) archiveName(bin string) string {
	name := bin
	if bin == manager {
		name = "backpressure-operator-manager"
	}
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", name, version, p.os, p.arch)
}

// sbomName is the file name hack/release.sh gives the SBOM of bin.
func (p platform) sbomName(bin string) string {
	return strings.TrimSuffix(p.archiveName(bin), ".tar.gz") + ".cdx.json"
}

func TestRelease(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	platforms := releasePlatforms(t)
	key := newSigningKey(t, root)
	dist := buildRelease(t, root, assets, platforms, key.secret)

	t.Run("files", func(t *testing.T) {
		want := []string{"backpressure-operator-" + chartVersion + ".tgz", "backpressure.yaml", "checksums.txt", "install.yaml", "provenance.intoto.json"}
		for _, p := range platforms {
			for _, bin := range []string{manager, plugin, proxy, broker} {
				want = append(want, p.archiveName(bin), p.sbomName(bin))
			}
		}
		for _, f := range slices.Clone(want) {
			want = append(want, f+".minisig")
		}
		slices.Sort(want)
		entries, err := os.ReadDir(dist)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("dist holds other files (-want +got):\n%s", diff)
		}
	})
	t.Run("archives", func(t *testing.T) { checkArchives(t, root, dist, platforms) })
	t.Run("checksums", func(t *testing.T) { checkChecksums(t, dist) })
	t.Run("install.yaml", func(t *testing.T) { checkInstall(t, root, dist) })
	t.Run("chart", func(t *testing.T) { checkChart(t, root, dist) })
	t.Run("krew", func(t *testing.T) { checkKrew(t, dist, platforms) })
	t.Run("signatures", func(t *testing.T) { checkSignatures(t, root, dist, key.public) })
	t.Run("SBOMs", func(t *testing.T) { checkSBOMs(t, dist, platforms) })
	t.Run("provenance", func(t *testing.T) { checkProvenance(t, dist) })
}

// releasePlatforms is the host's platform, or RELEASE_TEST_PLATFORMS.
func releasePlatforms(t *testing.T) []platform {
	t.Helper()
	list := os.Getenv("RELEASE_TEST_PLATFORMS")
	if list == "" {
		list = runtime.GOOS + "/" + runtime.GOARCH
	}
	var out []platform
	for _, f := range strings.Fields(list) {
		goos, goarch, ok := strings.Cut(f, "/")
		if !ok || goos == "" || goarch == "" {
			t.Fatalf("RELEASE_TEST_PLATFORMS: %q is not GOOS/GOARCH", f)
		}
		out = append(out, platform{goos, goarch})
	}
	return out
}

// buildRelease runs hack/release.sh into a temporary directory, signing
// with the minisign secret key at key, and returns that directory.
func buildRelease(t *testing.T, root, assets string, platforms []platform, key string) string {
	t.Helper()
	dist := t.TempDir()
	var names []string
	for _, p := range platforms {
		names = append(names, p.String())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "release.sh"), version)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"DIST="+dist,
		"RELEASE_PLATFORMS="+strings.Join(names, " "),
		"RELEASE_IMAGE="+image,
		"RELEASE_URL="+releaseURL+"/", // the trailing slash must not double
		"RELEASE_COMMIT="+commit,
		"RELEASE_SIGNING_KEY="+key,
		"RELEASE_BUILDER=test/release",
		testenv.AssetsEnv+"="+assets,
	)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/release.sh %s: %v\n%s", version, err, stderr.String())
	}
	t.Logf("hack/release.sh built %v in %s", names, time.Since(start).Round(time.Millisecond))
	return dist
}

// file is an entry of an archive.
type file struct {
	mode os.FileMode
	data []byte
}

// readArchive returns the regular files of a .tar.gz by name, failing on
// any other kind of entry.
func readArchive(t *testing.T, path string) map[string]file {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	files := map[string]file{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Clean(h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if name != "." {
				t.Errorf("%s: directory %s: the files belong at the top level", filepath.Base(path), h.Name)
			}
			continue
		case tar.TypeReg:
		default:
			t.Fatalf("%s: %s is not a regular file (type %c)", filepath.Base(path), h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		files[name] = file{mode: h.FileInfo().Mode(), data: data}
	}
}

// checkArchives checks that each archive holds its binary, LICENSE and
// README.md; that each binary was built static, with -trimpath and the
// version stamped in, for its platform; and that the host's binaries print
// the version.
func checkArchives(t *testing.T, root, dist string, platforms []platform) {
	license := readFile(t, filepath.Join(root, "LICENSE"))
	readme := readFile(t, filepath.Join(root, "README.md"))
	for _, p := range platforms {
		for _, bin := range []string{manager, plugin, proxy, broker} {
			name := p.archiveName(bin)
			files := readArchive(t, filepath.Join(dist, name))
			got := make([]string, 0, len(files))
			for n := range files {
				got = append(got, n)
			}
			slices.Sort(got)
			if want := []string{"LICENSE", "README.md", bin}; !slices.Equal(got, want) {
				t.Errorf("%s holds %v, want %v", name, got, want)
				continue
			}
			if !bytes.Equal(files["LICENSE"].data, license) {
				t.Errorf("%s: LICENSE differs from the repository's", name)
			}
			if !bytes.Equal(files["README.md"].data, readme) {
				t.Errorf("%s: README.md differs from the repository's", name)
			}
			exe := files[bin]
			if exe.mode&0o111 == 0 {
				t.Errorf("%s: %s is not executable (mode %v)", name, bin, exe.mode)
			}
			checkBuildInfo(t, name, exe.data, p)
			if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
				checkVersionFlag(t, bin, exe.data)
			}
		}
	}
}

// checkBuildInfo reads what the go command recorded in a binary of any
// platform — its GOOS and GOARCH, cgo off, -trimpath — and looks for the
// stamped version and commit.
func checkBuildInfo(t *testing.T, archive string, exe []byte, p platform) {
	t.Helper()
	bi, err := buildinfo.Read(bytes.NewReader(exe))
	if err != nil {
		t.Errorf("%s: read the Go build info: %v", archive, err)
		return
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	want := map[string]string{"GOOS": p.os, "GOARCH": p.arch, "CGO_ENABLED": "0", "-trimpath": "true"}
	for k, v := range want {
		if settings[k] != v {
			t.Errorf("%s: built with %s=%q, want %q", archive, k, settings[k], v)
		}
	}
	// With -trimpath the go command leaves -ldflags out of the build info;
	// what -X stamped is among the binary's strings.
	for _, s := range []string{version, commit} {
		if !bytes.Contains(exe, []byte(s)) {
			t.Errorf("%s: the binary does not hold %q: internal/version was not stamped", archive, s)
		}
	}
}

// checkVersionFlag runs a binary of the host's platform with --version.
func checkVersionFlag(t *testing.T, bin string, exe []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), bin)
	if err := os.WriteFile(path, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		t.Errorf("%s --version: %v", bin, err)
		return
	}
	want := map[string]string{
		manager: "manager " + version + " (commit " + commit + ")\n",
		plugin:  "kubectl backpressure version " + version + " (commit " + commit + ")\n",
		proxy:   "backpressure-proxy " + version + " (commit " + commit + ")\n",
		broker:  "backpressure-broker " + version + " (commit " + commit + ")\n",
	}[bin]
	if string(out) != want {
		t.Errorf("%s --version printed %q, want %q", bin, out, want)
	}
}

// checkChecksums checks that checksums.txt, in sha256sum's format, lists
// every other file of the release once, with its digest.
func checkChecksums(t *testing.T, dist string) {
	listed := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(dist, "checksums.txt"))))
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("checksums.txt: %q is not `<sha256>  <file>`", sc.Text())
			continue
		}
		if _, dup := listed[m[2]]; dup {
			t.Errorf("checksums.txt lists %s twice", m[2])
		}
		listed[m[2]] = m[1]
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// The signatures come after the checksums, and sign them.
		if e.Name() == "checksums.txt" || strings.HasSuffix(e.Name(), ".minisig") {
			continue
		}
		sum, ok := listed[e.Name()]
		if !ok {
			t.Errorf("checksums.txt does not list %s", e.Name())
			continue
		}
		delete(listed, e.Name())
		if got := sha256Hex(t, filepath.Join(dist, e.Name())); got != sum {
			t.Errorf("checksums.txt: %s has sha256 %s, the file %s", e.Name(), sum, got)
		}
	}
	for name := range listed {
		t.Errorf("checksums.txt lists %s, which the release does not hold", name)
	}
}

// checkInstall decodes install.yaml: every built-in kind strictly into its
// Go type, so a misspelt field fails; the CRD, the RBAC and the manager
// Deployment with the release's image must be there.
func checkInstall(t *testing.T, root, dist string) {
	decoder := serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	kinds := map[string][]string{}
	var deployment *appsv1.Deployment
	for _, doc := range yamlDocuments(t, readFile(t, filepath.Join(dist, "install.yaml"))) {
		var object struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &object); err != nil {
			t.Fatalf("install.yaml: %v", err)
		}
		kinds[object.Kind] = append(kinds[object.Kind], object.Metadata.Name)
		if object.Kind == "CustomResourceDefinition" {
			// Not in client-go's scheme: its spec must be the generated one.
			checkCRD(t, root, object.Metadata.Name, doc)
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("install.yaml: %s %s: %v", object.Kind, object.Metadata.Name, err)
			continue
		}
		if d, ok := obj.(*appsv1.Deployment); ok {
			deployment = d
		}
	}
	want := map[string]string{
		"Namespace":                "backpressure-system",
		"CustomResourceDefinition": "downstreamquotas.backpressure.dev",
		"ServiceAccount":           "backpressure-operator",
		"ClusterRole":              "backpressure-manager-role",
		"ClusterRoleBinding":       "backpressure-manager-rolebinding",
		"Role":                     "backpressure-leader-election-role",
		"Deployment":               "backpressure-operator",
		"Service":                  "backpressure-operator-metrics",
	}
	for kind, name := range want {
		if !slices.Contains(kinds[kind], name) {
			t.Errorf("install.yaml has no %s %s; its objects: %v", kind, name, kinds)
		}
	}
	if deployment == nil {
		return
	}
	if got := managerImage(deployment); got != image+":"+version {
		t.Errorf("install.yaml: the manager's image is %q, want %q", got, image+":"+version)
	}
}

// checkCRD compares the spec of a CRD of install.yaml, as JSON, with the
// generated one in config/crd/bases.
func checkCRD(t *testing.T, root, name string, doc []byte) {
	t.Helper()
	plural, group, _ := strings.Cut(name, ".")
	generated, err := yaml.YAMLToJSON(readFile(t, filepath.Join(root, "config", "crd", "bases", group+"_"+plural+".yaml")))
	if err != nil {
		t.Fatal(err)
	}
	var want, got struct {
		Spec map[string]any `json:"spec"`
	}
	if err := json.Unmarshal(generated, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
		t.Errorf("install.yaml: the spec of CRD %s differs from config/crd/bases (-want +got):\n%s", name, diff)
	}
}

// checkChart loads the packaged chart with the pinned Helm and renders it:
// the manager runs the release's image, and the chart's version and
// appVersion reach the standard labels.
func checkChart(t *testing.T, root, dist string) {
	chart := filepath.Join(dist, "backpressure-operator-"+chartVersion+".tgz")
	rendered := helm(t, root, "template", "backpressure-operator", chart, "--namespace", "backpressure-system",
		"--kube-version", kubeVersion, "--include-crds")
	decoder := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer()
	var deployments []*appsv1.Deployment
	crd := false
	for _, doc := range yamlDocuments(t, rendered) {
		var object struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(doc, &object); err != nil {
			t.Fatalf("helm template: %v", err)
		}
		switch object.Kind {
		case "CustomResourceDefinition":
			crd = true
		case "Deployment":
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("helm template: Deployment: %v", err)
			}
			deployments = append(deployments, obj.(*appsv1.Deployment))
		}
	}
	if !crd {
		t.Error("the chart renders no CustomResourceDefinition")
	}
	if len(deployments) != 1 {
		t.Fatalf("the chart renders %d Deployments, want 1", len(deployments))
	}
	d := deployments[0]
	if got := managerImage(d); got != image+":"+version {
		t.Errorf("the chart's manager image is %q, want %q", got, image+":"+version)
	}
	want := map[string]string{"helm.sh/chart": "backpressure-operator-" + chartVersion, "app.kubernetes.io/version": version}
	for k, v := range want {
		if d.Labels[k] != v {
			t.Errorf("the chart's Deployment has label %s=%q, want %q: the chart's version or appVersion is not the release's", k, d.Labels[k], v)
		}
	}
}

// krewPlugin is krew's index.krew.dev Plugin (v1alpha2), every field the
// format defines, so that strict decoding rejects any other.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage,omitempty"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description,omitempty"`
		Caveats          string         `json:"caveats,omitempty"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

// krewPlatform is one platform of a krew Plugin.
type krewPlatform struct {
	Selector *metav1.LabelSelector `json:"selector"`
	URI      string                `json:"uri"`
	Sha256   string                `json:"sha256"`
	Bin      string                `json:"bin"`
	Files    []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

// checkKrew validates the krew manifest the way krew's index validation
// does — name, semantic version with a v, short description, a selector, a
// URI, a sha256, a relative bin and files per platform — and checks that
// each platform points at its archive, with its digest, and that the files
// it installs are in that archive.
func checkKrew(t *testing.T, dist string, platforms []platform) {
	var p krewPlugin
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(dist, "backpressure.yaml")), &p); err != nil {
		t.Fatalf("backpressure.yaml is not a krew Plugin: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		t.Errorf("backpressure.yaml is %s %s, want krew.googlecontainertools.github.com/v1alpha2 Plugin", p.APIVersion, p.Kind)
	}
	// krew requires the manifest's file name to be the plugin's name.
	if p.Metadata.Name != "backpressure" {
		t.Errorf("metadata.name is %q, want backpressure, the file's name and the plugin's (kubectl backpressure)", p.Metadata.Name)
	}
	if p.Spec.Version != version || !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(p.Spec.Version) {
		t.Errorf("spec.version is %q, want %q", p.Spec.Version, version)
	}
	if strings.TrimSpace(p.Spec.ShortDescription) == "" {
		t.Error("spec.shortDescription is empty; krew requires it")
	}
	if len(p.Spec.Platforms) != len(platforms) {
		t.Fatalf("spec.platforms has %d entries, want one per platform built, %d", len(p.Spec.Platforms), len(platforms))
	}
	hexDigest := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, want := range platforms {
		got := p.Spec.Platforms[i]
		field := fmt.Sprintf("spec.platforms[%d]", i)
		if got.Selector == nil {
			t.Errorf("%s.selector is missing", field)
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(got.Selector); err != nil {
			t.Errorf("%s.selector: %v", field, err)
		}
		if sel := got.Selector.MatchLabels; sel["os"] != want.os || sel["arch"] != want.arch || len(sel) != 2 || len(got.Selector.MatchExpressions) != 0 {
			t.Errorf("%s.selector is %+v, want matchLabels os: %s, arch: %s", field, got.Selector, want.os, want.arch)
		}
		archive := want.archiveName(plugin)
		if wantURI := releaseURL + "/" + archive; got.URI != wantURI {
			t.Errorf("%s.uri is %q, want %q", field, got.URI, wantURI)
		}
		if !hexDigest.MatchString(got.Sha256) {
			t.Errorf("%s.sha256 %q is not a lower-case hex sha256", field, got.Sha256)
		} else if sum := sha256Hex(t, filepath.Join(dist, archive)); got.Sha256 != sum {
			t.Errorf("%s.sha256 is %s, the archive's %s", field, got.Sha256, sum)
		}
		if got.Bin != plugin || filepath.IsAbs(got.Bin) {
			t.Errorf("%s.bin is %q, want %q", field, got.Bin, plugin)
		}
		if len(got.Files) == 0 {
			t.Errorf("%s.files is empty", field)
		}
		files := readArchive(t, filepath.Join(dist, archive))
		installed := false
		for j, f := range got.Files {
			if f.From == "" || f.To == "" {
				t.Errorf("%s.files[%d] needs from and to, got %+v", field, j, f)
			}
			if _, ok := files[f.From]; !ok {
				t.Errorf("%s.files[%d].from: %s is not in %s", field, j, f.From, archive)
			}
			installed = installed || (f.From == got.Bin && f.To == ".")
		}
		if !installed {
			t.Errorf("%s.files does not install the bin %s at the top of the plugin's directory", field, got.Bin)
		}
	}
}

// managerImage is the image of the Deployment's manager container.
func managerImage(d *appsv1.Deployment) string {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return c.Image
		}
	}
	return ""
}

// helm runs the Helm pinned in hack/tools/helm and returns its stdout.
func helm(t *testing.T, root string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=hack/tools/helm/go.mod", "helm"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// yamlDocuments splits a multi-document YAML stream into its non-empty
// documents, as JSON.
func yamlDocuments(t *testing.T, data []byte) [][]byte {
	t.Helper()
	var docs [][]byte
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("split the YAML documents: %v", err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("YAML document: %v\n%s", err, doc)
		}
		if s := string(bytes.TrimSpace(js)); s == "null" || s == "{}" {
			continue
		}
		docs = append(docs, js)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func sha256Hex(t *testing.T, path string) string {
	t.Helper()
	sum := sha256.Sum256(readFile(t, path))
	return hex.EncodeToString(sum[:])
}
