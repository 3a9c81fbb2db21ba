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

// docBlock is one fenced block of a section of the docs: commands ("sh")
// or what the commands before it print ("text"); state is the STATE of a
// <!-- docs-check: STATE --> line just before it.
type docBlock struct {
	lang, body, state string
}

// quickstartBlocks returns the blocks of the README's quickstart.
func quickstartBlocks(t *testing.T, readme string) []docBlock {
	t.Helper()
	return sectionBlocks(t, "README.md", readme, quickstartHeading)
}

// sectionBlocks returns the fenced blocks of the section of text that
// starts at heading and ends at the next heading of its level, in order.
func sectionBlocks(t *testing.T, doc, text, heading string) []docBlock {
	t.Helper()
	_, section, ok := strings.Cut(text, "\n"+heading)
	if !ok {
		t.Fatalf("%s has no %q section", doc, heading)
	}
	level := heading[:strings.Index(heading, " ")+1]
	if i := strings.Index(section, "\n"+level); i >= 0 {
		section = section[:i]
	}
	var blocks []docBlock
	var cur *docBlock
	var body []string
	state := ""
	for line := range strings.SplitSeq(section, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "<!-- docs-check: "):
			state = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- docs-check: "), " -->")
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &docBlock{lang: strings.TrimPrefix(line, "```"), state: state}
			body, state = nil, ""
		case cur != nil && line == "```":
			cur.body = strings.Join(body, "\n")
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body = append(body, line)
		case strings.TrimSpace(line) != "":
			state = ""
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
// the commands just before it, but for what changes from run to run (see
// normalizeOutput). Only the environment differs from a user's: the local
// cluster's directory is the test's own, and the manager serves no metrics
// or probes, whose fixed ports another process may hold.
func TestQuickstart(t *testing.T) {
	runDocSection(t, "README.md", quickstartHeading, "", nil)
}

// The outputs of docs/installing.md's first quota are what the operator
// prints at each stage: the section's commands run on the quickstart's
// local cluster, after the quickstart's first commands have started it and
// the operator, and each block marked <!-- docs-check: STATE --> runs once
// the state it describes is set up, as below.
func TestInstallingFirstQuota(t *testing.T) {
	readme := quickstartBlocks(t, string(readRepoFile(t, "README.md")))
	if len(readme) == 0 || readme[0].lang != "sh" {
		t.Fatal("the README's quickstart does not start with a command block")
	}
	// The quickstart's lines that start the cluster and the operator,
	// without those that start the pods or apply the sample.
	var prelude []string
	for line := range strings.SplitSeq(readme[0].body, "\n") {
		if strings.Contains(line, "test/e2e/cmd/pods") || strings.HasPrefix(line, "kubectl ") {
			continue
		}
		prelude = append(prelude, line)
	}
	runDocSection(t, "docs/installing.md", "## 4. A first quota", strings.Join(prelude, "\n"), map[string]string{
		// No kubelet plays the pods yet: none turns Ready.
		"no pods": "",
		// Pods that turn Ready and acknowledge, as the sample's do (job 2).
		"pods": `go run ./test/e2e/cmd/pods -n shop &> "$DEV_CLUSTER_DIR/pods.log" &`,
		// The gateway at its HPA's floor of 4 pods, replaced by 4 that do
		// not acknowledge, which have been handed 10 permits each (with the
		// delay shortened, then restored to its default).
		"four pods that do not acknowledge": `kubectl scale deployment/search-gateway -n shop --replicas=4
until [ "$(kubectl get pods -n shop -o name | wc -l)" -eq 4 ]; do sleep 0.2; done
kubectl wait dq/logistics-api -n shop --for=jsonpath='{.status.podsApplied}'=4/4 --timeout=2m
kill %2; wait %2 || true
kubectl delete pods -n shop --all --grace-period=0 --force
kubectl patch dq logistics-api -n shop --type=merge -p '{"spec":{"handover":{"unacknowledgedDelay":"1s"}}}'
go run ./test/e2e/cmd/pods -n shop --acknowledge=false &> "$DEV_CLUSTER_DIR/pods-unacknowledged.log" &
kubectl wait dq/logistics-api -n shop --for=jsonpath='{.status.replicas.divisor}'=4 --timeout=2m
kubectl wait dq/logistics-api -n shop --for=condition=HandedOver --timeout=1m
kubectl patch dq logistics-api -n shop --type=json -p '[{"op":"remove","path":"/spec/handover"}]'`,
	})
}

// runDocSection runs the commands of the section of doc that starts at
// heading (up to the next heading of its level) in one bash session, with
// job control as in a terminal, on a local cluster in a directory of the
// test's own: prelude first, then each sh block in order, each preceded by
// states[STATE] when a <!-- docs-check: STATE --> line comes before it. The
// output of each sh block must show every line of the text block after it,
// in order, but for what normalizeOutput takes away. Whatever happens, the
// jobs and the cluster are stopped.
func runDocSection(t *testing.T, doc, heading, prelude string, states map[string]string) {
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-controller-manager")); err != nil {
		t.Fatalf("the local cluster needs kube-controller-manager, not built in %s (run hack/setup-envtest.sh): %v", assets, err)
	}
	text := string(readRepoFile(t, doc))
	blocks := sectionBlocks(t, doc, text, heading)
	var script strings.Builder
	// Job control, as in a terminal: `cmd &` gets a process group of its
	// own, which `kill %1` signals as a whole.
	script.WriteString(`set -euo pipefail -m
cleanup() {
  for pgid in $(jobs -p); do kill -TERM -- "-${pgid}" 2>/dev/null || true; done
  wait || true
  hack/dev-cluster.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
`)
	script.WriteString("echo '@@setup@@'\n" + prelude + "\n")
	commands := 0
	for i, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		if b.state != "" {
			setup, ok := states[b.state]
			if !ok {
				t.Fatalf("%s: no set-up for <!-- docs-check: %s -->", doc, b.state)
			}
			fmt.Fprintf(&script, "echo '@@setup@@'\n%s\n", setup)
		}
		fmt.Fprintf(&script, "echo '@@block %d@@'\n%s\n", i, b.body)
		commands++
	}
	if commands < 2 {
		t.Fatalf("%s: found %d sh blocks under %q, want at least 2: the test would run next to nothing", doc, commands, heading)
	}

	dir := t.TempDir()
	// The commands end, and their trap stops the cluster, before the test
	// binary's own deadline, which would kill it with no clean-up.
	timeout := 10 * time.Minute
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < timeout {
		timeout = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
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
	t.Logf("%s's commands took %s", doc, time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("%s: the commands failed: %v\nstdout:\n%s\nstderr:\n%s\nlogs:\n%s", doc, err, stdout.String(), stderr.String(), logs(dir))
	}

	out := map[int][]string{}
	cur := -1
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "@@block %d@@", &n); err == nil {
			cur = n
			continue
		}
		if line == "@@setup@@" {
			cur = -1
			continue
		}
		out[cur] = append(out[cur], line)
	}
	checked := 0
	for i, b := range blocks {
		if b.lang != "text" {
			continue
		}
		if i == 0 || blocks[i-1].lang != "sh" {
			t.Errorf("%s: output block %d follows no command block", doc, i)
			continue
		}
		checked++
		got, next := normalizeLines(out[i-1]), 0
		for _, w := range normalizeLines(strings.Split(b.body, "\n")) {
			if w == "" || w == "..." {
				continue
			}
			j := slices.Index(got[next:], w)
			if j < 0 {
				t.Errorf("%s: the commands\n%s\nno longer print, after what came before in the document:\n%s\nthey printed:\n%s",
					doc, blocks[i-1].body, w, strings.Join(out[i-1], "\n"))
				break
			}
			next += j + 1
		}
	}
	if checked < 2 {
		t.Errorf("%s: found %d outputs under %q, want at least 2: the test would check next to nothing", doc, checked, heading)
	}
}

// normalizeLines normalizes each line (normalizeOutput) and sorts each run
// of pod rows, whose order follows their random names.
func normalizeLines(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = normalizeOutput(l)
	}
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && strings.HasPrefix(out[j], "search-gateway-<pod> ") {
			j++
		}
		if j > i {
			slices.Sort(out[i:j])
			i = j
		} else {
			i++
		}
	}
	return out
}

// logs returns the last lines of the logs the commands wrote into the local
// cluster's directory, for a failure's message.
func logs(dir string) string {
	var b strings.Builder
	for _, name := range []string{"manager.log", "pods.log", "pods-unacknowledged.log", "devcluster.log"} {
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
