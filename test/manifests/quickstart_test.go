package manifests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// quickstartHeading starts the README's quickstart; the next "## " heading
// ends it.
const quickstartHeading = "## Quickstart"

// quickstartBlock is one fenced block of the quickstart: commands ("sh") or
// what the commands before it print ("text").
type quickstartBlock struct {
	lang, body string
}

// quickstartBlocks returns the sh and text blocks of the README's quickstart
// section, in order.
func quickstartBlocks(t *testing.T, readme string) []quickstartBlock {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+quickstartHeading)
	if !ok {
		t.Fatalf("README.md has no %q section", quickstartHeading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var blocks []quickstartBlock
	var cur *quickstartBlock
	var body []string
	for line := range strings.SplitSeq(section, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &quickstartBlock{lang: strings.TrimPrefix(line, "```")}
			body = nil
		case cur != nil && line == "```":
			cur.body = strings.Join(body, "\n")
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		}
	}
	return blocks
}

// Normalizations of what changes from run to run: the random suffixes of a
// Deployment's pod names, ages, the division's revision (how many steps the
// pods' turning Ready took), and the alignment of table columns.
var (
	podSuffix  = regexp.MustCompile(`\b(search-gateway)-[a-z0-9]{5,10}-[a-z0-9]{5}\b`)
	revision   = regexp.MustCompile(`\brevision \d+\b`)
	age        = regexp.MustCompile(`\b\d+m\d+s\b|\b\d+(\.\d+)?[smh]\b`)
	whitespace = regexp.MustCompile(`\s+`)
)

func normalizeOutput(line string) string {
	line = podSuffix.ReplaceAllString(line, "$1-<pod>")
	line = age.ReplaceAllString(line, "<age>")
	line = revision.ReplaceAllString(line, "revision <n>")
	return strings.TrimSpace(whitespace.ReplaceAllString(line, " "))
}

// The README's quickstart works as written, from a clone: its commands run
// in order in one bash session, with job control as in a terminal, against
// a local cluster of the cached control plane (hack/dev-cluster.sh), and
// every line of each output it shows appears, in order, in the output of
// the commands just before it, but for pod names' random suffixes, ages
// and column widths. Only the environment differs from a user's: the local
// cluster's directory is the test's own, and the manager serves no metrics
// or probes, whose fixed ports another process may hold.
func TestQuickstart(t *testing.T) {
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-controller-manager")); err != nil {
		t.Fatalf("the quickstart's cluster needs kube-controller-manager, not built in %s (run hack/setup-envtest.sh): %v", assets, err)
	}
	blocks := quickstartBlocks(t, string(readRepoFile(t, "README.md")))
	var script strings.Builder
	// Job control, as in a terminal: `cmd &` gets a process group of its
	// own, which `kill %1` signals as a whole. Whatever fails, the jobs and
	// the cluster are stopped.
	script.WriteString(`set -euo pipefail -m
cleanup() {
  for pgid in $(jobs -p); do kill -TERM -- "-${pgid}" 2>/dev/null || true; done
  wait || true
  hack/dev-cluster.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
`)
	commands := 0
	for i, b := range blocks {
		if b.lang == "sh" {
			fmt.Fprintf(&script, "echo '@@block %d@@'\n%s\n", i, b.body)
			commands++
		}
	}
	if commands < 3 {
		t.Fatalf("found %d sh blocks in the quickstart, want at least 3: the test would run next to nothing", commands)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"KUBEBUILDER_ASSETS="+assets,
		"DEV_CLUSTER_DIR="+dir,
		"RUN_ARGS=--metrics-bind-address=0 --health-probe-bind-address=0",
	)
	// On timeout bash gets SIGTERM, so that its trap stops what it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t.Cleanup(func() {
		// A last resort should bash itself have been killed.
		stop := exec.Command(filepath.Join(repoRoot, "hack", "dev-cluster.sh"), "stop")
		stop.Env = append(os.Environ(), "DEV_CLUSTER_DIR="+dir)
		_ = stop.Run()
	})
	start := time.Now()
	err = cmd.Run()
	t.Logf("the quickstart took %s", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("the quickstart's commands failed: %v\nstdout:\n%s\nstderr:\n%s\nmanager's and pods' logs:\n%s", err, stdout.String(), stderr.String(), logs(dir))
	}

	// Split stdout by block, and check each text block against the output
	// of the sh block before it.
	out := map[int][]string{}
	cur := -1
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "@@block %d@@", &n); err == nil {
			cur = n
			continue
		}
		out[cur] = append(out[cur], normalizeOutput(line))
	}
	checked := 0
	for i, b := range blocks {
		if b.lang != "text" {
			continue
		}
		if i == 0 || blocks[i-1].lang != "sh" {
			t.Errorf("quickstart output block %d follows no command block", i)
			continue
		}
		checked++
		got, next := out[i-1], 0
		for want := range strings.SplitSeq(b.body, "\n") {
			w := normalizeOutput(want)
			if w == "" || w == "..." {
				continue
			}
			j := slices.Index(got[next:], w)
			if j < 0 {
				t.Errorf("README quickstart: the commands\n%s\nno longer print, after what came before in the README:\n%s\nthey printed:\n%s",
					blocks[i-1].body, want, strings.Join(got, "\n"))
				break
			}
			next += j + 1
		}
	}
	if checked < 2 {
		t.Errorf("found %d outputs in the quickstart, want at least 2: the test would check next to nothing", checked)
	}
}

// logs returns the manager's and the pods' logs the quickstart wrote into
// the local cluster's directory, for a failure's message.
func logs(dir string) string {
	var b strings.Builder
	for _, name := range []string{"manager.log", "pods.log", "devcluster.log"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}
