package modgraph

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// banned are the path prefixes of the modules that only a benchmark
// (hack/bench) or the demo's plot (hack/stormplot) needs.
var banned = []string{
	"github.com/panjf2000/ants",
	"gonum.org/",
}

// bannedIn returns the paths in paths that fall under a banned prefix.
func bannedIn(paths []string) []string {
	var found []string
	for _, p := range paths {
		for _, b := range banned {
			if strings.HasPrefix(p, b) {
				found = append(found, p)
			}
		}
	}
	return found
}

// goCmd runs the go command in the repository's root and returns its
// standard output.
func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), root, err, stderr)
	}
	return out
}

// TestRootRequirements: the root go.mod requires neither ants nor gonum,
// directly or indirectly. An application's module graph holds every
// requirement of the root go.mod, whatever packages it imports.
func TestRootRequirements(t *testing.T) {
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(goCmd(t, "mod", "edit", "-json", "go.mod"), &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != "github.com/backpressure-dev/backpressure-operator" || len(mod.Require) == 0 {
		t.Fatalf("go mod edit -json read module %q with %d requirements; not the root go.mod", mod.Module.Path, len(mod.Require))
	}
	var paths []string
	for _, r := range mod.Require {
		paths = append(paths, r.Path)
	}
	if found := bannedIn(paths); len(found) != 0 {
		t.Errorf("the root go.mod requires %v; move their users into hack/bench or hack/stormplot", found)
	}
}

// TestRuntimeDependencies: no package of pkg/backpressure, nor its tests, imports
// ants or gonum.
func TestRuntimeDependencies(t *testing.T) {
	out := strings.Fields(string(goCmd(t, "list", "-deps", "-test", "./pkg/backpressure/...")))
	if len(out) < 20 || !slices.Contains(out, "github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate") {
		t.Fatalf("go list -deps -test ./pkg/backpressure/... listed %d packages, without the gate", len(out))
	}
	if found := bannedIn(out); len(found) != 0 {
		t.Errorf("pkg/backpressure depends on %v", found)
	}
}

// TestNestedModules: the benchmark and plotting modules exist where the
// Makefile runs them, and each replaces this module with the working tree,
// so that they measure and draw the code beside them.
func TestNestedModules(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"hack/bench", "hack/stormplot"} {
		var mod struct {
			Replace []struct{ Old, New struct{ Path string } }
		}
		if err := json.Unmarshal(goCmd(t, "mod", "edit", "-json", filepath.Join(root, dir, "go.mod")), &mod); err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, r := range mod.Replace {
			ok = ok || r.Old.Path == "github.com/backpressure-dev/backpressure-operator" && r.New.Path == "../.."
		}
		if !ok {
			t.Errorf("%s/go.mod does not replace github.com/backpressure-dev/backpressure-operator with ../..: %+v", dir, mod.Replace)
		}
	}
}
