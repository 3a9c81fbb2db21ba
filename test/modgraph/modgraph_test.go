package modgraph

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// The repository's modules, by path, and their directories.
const (
	rootModule    = "github.com/backpressure-dev/backpressure-operator"
	libraryModule = rootModule + "/pkg/backpressure"
	planModule    = rootModule + "/api/plan"
	reserveModule = rootModule + "/api/reserve"
)

// moduleDirs are the directories of the repository's modules, relative to
// the root, keyed by module path.
var moduleDirs = map[string]string{
	rootModule:                          ".",
	planModule:                          "api/plan",
	reserveModule:                       "api/reserve",
	libraryModule:                       "pkg/backpressure",
	libraryModule + "/internal/apitest": "pkg/backpressure/internal/apitest",
	rootModule + "/hack/bench":          "hack/bench",
	rootModule + "/hack/stormplot":      "hack/stormplot",
}

// banned are the path prefixes of the modules that only a benchmark
// (hack/bench), the demo's plot (hack/stormplot) or the protobuf compiler
// (hack/tools/protoc) needs.
var banned = []string{
	"github.com/panjf2000/ants",
	"gonum.org/",
	"github.com/bufbuild/",
}

// operatorOnly are the modules an application that requires the library
// must not get, besides the operator's module itself: controller-runtime,
// which only the operator and its tests need. (ants and gonum may be in a module
// graph: grpc's go.mod requires gonum for its own tests; what must not
// happen is that a go.mod of ours requires them or that a package of the
// library imports them.)
var operatorOnly = []string{"sigs.k8s.io/controller-runtime"}

// matching returns the paths in paths that fall under one of prefixes.
func matching(paths, prefixes []string) []string {
	var found []string
	for _, p := range paths {
		for _, b := range prefixes {
			if strings.HasPrefix(p, b) {
				found = append(found, p)
				break
			}
		}
	}
	return found
}

// root returns the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	dir, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// goCmd runs the go command in dir, with env added to the environment, and
// returns its standard output.
func goCmd(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off"}, env...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return out
}

// goMod is what the tests read of a go.mod.
type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Indirect bool
	}
	Replace []struct{ Old, New struct{ Path string } }
}

func readGoMod(t *testing.T, dir string) goMod {
	t.Helper()
	var mod goMod
	if err := json.Unmarshal(goCmd(t, dir, nil, "mod", "edit", "-json"), &mod); err != nil {
		t.Fatal(err)
	}
	return mod
}

// modules returns the paths of the modules in the module graph of the
// module in dir, the main module first.
func modules(t *testing.T, dir string) []string {
	t.Helper()
	return strings.Fields(string(goCmd(t, dir, nil, "list", "-m", "-f", "{{.Path}}", "all")))
}

// requirements returns the paths the go.mod in dir requires.
func requirements(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	for _, r := range readGoMod(t, dir).Require {
		paths = append(paths, r.Path)
	}
	return paths
}

// TestRequirements: neither the root go.mod nor the library's nor the plan
// document's nor the permit server's protocol's requires ants, gonum or
// protocompile, directly or indirectly. An
// application's module graph holds every requirement of a module it
// requires, whatever packages it imports.
func TestRequirements(t *testing.T) {
	for _, dir := range []string{".", "pkg/backpressure", "api/plan", "api/reserve"} {
		paths := requirements(t, filepath.Join(root(t), dir))
		if len(paths) == 0 {
			t.Fatalf("%s/go.mod requires nothing; not the go.mod of the repository", dir)
		}
		if found := matching(paths, banned); len(found) != 0 {
			t.Errorf("%s/go.mod requires %v; move their users into hack/bench or hack/stormplot", dir, found)
		}
	}
}

// TestLibraryModuleGraph: the library's module graph holds neither the
// operator's module nor controller-runtime nor ants nor gonum, and its
// go.mod requires nothing its packages and tests do not need.
func TestLibraryModuleGraph(t *testing.T) {
	dir := filepath.Join(root(t), "pkg", "backpressure")
	mods := modules(t, dir)
	if len(mods) < 10 || mods[0] != libraryModule {
		t.Fatalf("go list -m all in %s listed %v; not the library's module", dir, mods)
	}
	if found := matching(mods, operatorOnly); len(found) != 0 || slices.Contains(mods, rootModule) {
		t.Errorf("the library's module graph holds %v (the operator's module: %v)", found, slices.Contains(mods, rootModule))
	}
	if diff := goCmd(t, dir, nil, "mod", "tidy", "-diff"); len(diff) != 0 {
		t.Errorf("the library's go.mod is not tidy:\n%s", diff)
	}
	t.Logf("the library's module graph: %d modules", len(mods))
}

// TestApplicationModuleGraph: an application that requires the library, and
// imports every public package of it, gets a module graph without the
// operator's module, controller-runtime, ants or gonum, and with nothing
// the library's own graph lacks.
func TestApplicationModuleGraph(t *testing.T) {
	repo := root(t)
	libDir := filepath.Join(repo, "pkg", "backpressure")
	var pkgs []string
	for _, p := range strings.Fields(string(goCmd(t, libDir, nil, "list", "./..."))) {
		if !strings.Contains(p, "/internal/") {
			pkgs = append(pkgs, p)
		}
	}
	if !slices.Contains(pkgs, libraryModule+"/gate") || !slices.Contains(pkgs, libraryModule+"/sourceflags") {
		t.Fatalf("go list ./... in the library listed %v, without the gate", pkgs)
	}

	app := t.TempDir()
	var main strings.Builder
	main.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		main.WriteString("\t_ \"" + p + "\"\n")
	}
	main.WriteString(")\n\nfunc main() {}\n")
	gomod := "module example.com/app\n\ngo 1.26.0\n\nrequire " + libraryModule + " v0.0.0\n\nreplace (\n" +
		"\t" + libraryModule + " => " + libDir + "\n" +
		"\t" + planModule + " => " + filepath.Join(repo, "api", "plan") + "\n" +
		"\t" + reserveModule + " => " + filepath.Join(repo, "api", "reserve") + "\n)\n"
	sums, err := os.ReadFile(filepath.Join(libDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"main.go": []byte(main.String()), "go.mod": []byte(gomod), "go.sum": sums} {
		if err := os.WriteFile(filepath.Join(app, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, app, []string{"GOFLAGS=-mod=mod"}, "mod", "tidy")
	goCmd(t, app, nil, "build", "./...")
	if got := requirements(t, app); !slices.Contains(got, libraryModule) || !slices.Contains(got, planModule) || !slices.Contains(got, reserveModule) {
		t.Fatalf("the application's go.mod requires %v, not the library, the plan document and the permit server's protocol", got)
	}

	appMods := modules(t, app)
	if found := matching(appMods, operatorOnly); len(found) != 0 || slices.Contains(appMods, rootModule) {
		t.Errorf("an application requiring the library gets %v (the operator's module: %v)", found, slices.Contains(appMods, rootModule))
	}
	libMods := modules(t, libDir)
	var extra []string
	for _, m := range appMods[1:] {
		if !slices.Contains(libMods, m) {
			extra = append(extra, m)
		}
	}
	if len(extra) != 0 {
		t.Errorf("an application requiring the library gets modules the library's graph lacks: %v", extra)
	}
	t.Logf("an application requiring the library: %d modules in its graph", len(appMods))
}

// TestLayering: following every import, no package of the library or its
// tests reaches the operator's packages, no package of the operator
// reaches the library's, and the plan document and the permit server's
// protocol (api/reserve), the leaves both sides import, reach neither.
func TestLayering(t *testing.T) {
	repo := root(t)
	deps := func(dir string, patterns ...string) []string {
		return strings.Fields(string(goCmd(t, filepath.Join(repo, dir), nil, append([]string{"list", "-deps", "-test"}, patterns...)...)))
	}
	ours := func(paths []string, keep func(string) bool) []string {
		var found []string
		for _, p := range paths {
			// A test's own packages count as the package they test.
			rel := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(p, rootModule+"/"), ".test"), "_test")
			if strings.HasPrefix(p, rootModule+"/") && keep(rel) {
				found = append(found, p)
			}
		}
		return found
	}
	isLibrary := func(p string) bool { return strings.HasPrefix(p, "pkg/backpressure") }
	isPlan := func(p string) bool { return p == "api/plan" || strings.HasPrefix(p, "api/plan/") }
	isReserve := func(p string) bool { return p == "api/reserve" || strings.HasPrefix(p, "api/reserve/") }
	isOperator := func(p string) bool { return !isLibrary(p) && !isPlan(p) && !isReserve(p) }

	lib := deps("pkg/backpressure", "./...")
	if !slices.Contains(lib, libraryModule+"/gate") {
		t.Fatalf("go list -deps -test in pkg/backpressure listed %d packages, without the gate", len(lib))
	}
	if found := ours(lib, isOperator); len(found) != 0 {
		t.Errorf("the library reaches the operator's packages %v", found)
	}
	if found := matching(lib, banned); len(found) != 0 {
		t.Errorf("the library depends on %v", found)
	}
	operator := deps(".", "./internal/...", "./cmd/manager", "./cmd/kubectl-backpressure")
	if !slices.Contains(operator, rootModule+"/internal/controller") {
		t.Fatalf("go list -deps -test of the operator listed %d packages, without the controller", len(operator))
	}
	if found := ours(operator, isLibrary); len(found) != 0 {
		t.Errorf("the operator reaches the library's packages %v", found)
	}
	if found := ours(deps("api/plan", "./..."), func(p string) bool { return !isPlan(p) }); len(found) != 0 {
		t.Errorf("the plan document reaches %v", found)
	}
	if found := ours(deps("api/reserve", "./..."), func(p string) bool { return !isReserve(p) }); len(found) != 0 {
		t.Errorf("the permit server's protocol reaches %v", found)
	}
}

// TestNestedModules: every module of the repository that requires another
// of its modules replaces it with that module's directory, so that each
// builds, tests and measures the code beside it.
func TestNestedModules(t *testing.T) {
	repo := root(t)
	for path, dir := range moduleDirs {
		mod := readGoMod(t, filepath.Join(repo, dir))
		if mod.Module.Path != path {
			t.Errorf("%s/go.mod is module %q, want %q", dir, mod.Module.Path, path)
			continue
		}
		replaced := map[string]string{}
		for _, r := range mod.Replace {
			replaced[r.Old.Path] = r.New.Path
		}
		for _, r := range mod.Require {
			target, ours := moduleDirs[r.Path]
			if !ours {
				continue
			}
			want, err := filepath.Rel(filepath.Join(repo, dir), filepath.Join(repo, target))
			if err != nil {
				t.Fatal(err)
			}
			if got := replaced[r.Path]; filepath.Clean(got) != want && got != "./"+want {
				t.Errorf("%s/go.mod requires %s replaced with %q, want %q", dir, r.Path, got, want)
			}
		}
	}
}
