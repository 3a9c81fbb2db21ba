package manifests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/cmd/kubectl-backpressure/livefixture"
)

// markdownLink matches the target of an inline Markdown link.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// inlineCode matches a Markdown code span.
var inlineCode = regexp.MustCompile("`[^`\n]*`")

// Every relative link in the README and docs/ leads to a file of the repository, and every
// #fragment to a heading of its document; so does every alert's runbook_url.
func TestDocsLinksResolve(t *testing.T) {
	for _, doc := range docFiles(t) {
		// Code spans are not links, whatever they hold.
		text := inlineCode.ReplaceAllString(string(readRepoFile(t, doc)), "")
		for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			file := doc
			if path != "" {
				file = filepath.Join(filepath.Dir(doc), path)
				if !repoPathExists(file) {
					t.Errorf("%s: link %q: %s does not exist", doc, target, file)
					continue
				}
			}
			if fragment != "" && !slices.Contains(anchors(t, file), fragment) {
				t.Errorf("%s: link %q: %s has no heading #%s", doc, target, file, fragment)
			}
		}
	}

	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, "config/prometheus/alerts.yaml"), &rule); err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/backpressure-dev/backpressure-operator/blob/main/"
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			path, fragment, _ := strings.Cut(strings.TrimPrefix(r.Annotations["runbook_url"], base), "#")
			if path != "docs/operating.md" || !slices.Contains(anchors(t, path), fragment) {
				t.Errorf("alert %s: runbook_url %q does not lead to a heading of docs/operating.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
}

// The CLI sessions in the README and the docs are what the CLI prints: every
// line of a "$ go run ./cmd/kubectl-backpressure ..." or "$ kubectl
// backpressure ..." block (but "..." lines, which stand for cut ones) appears
// in the real output, in order. The live sessions (status, plan dq/NAME) run
// against the control plane holding livefixture's objects, through its
// kubeconfig.
func TestDocsCLIOutputIsCurrent(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-backpressure")
	run(t, "go", "build", "-o", bin, "./cmd/kubectl-backpressure")
	sessions, liveSessions := 0, 0
	for _, doc := range docFiles(t) {
		for _, block := range fencedBlocks(string(readRepoFile(t, doc))) {
			lines := strings.Split(block, "\n")
			cmd, ok := cliSession(lines[0])
			if !ok {
				continue
			}
			sessions++
			args := strings.Fields(cmd)
			if liveSession(args) {
				liveSessions++
				args = append(args, "--kubeconfig", liveKubeconfig(t))
			}
			out := strings.Split(string(run(t, bin, args...)), "\n")
			next := 0
			for _, want := range lines[1:] {
				if strings.TrimSpace(want) == "..." || strings.TrimSpace(want) == "" {
					continue
				}
				i := slices.IndexFunc(out[next:], func(got string) bool { return strings.TrimRight(got, " ") == strings.TrimRight(want, " ") })
				if i < 0 {
					t.Errorf("%s: `%s` no longer prints, after what came before in the docs:\n%s", doc, cmd, want)
					break
				}
				next += i + 1
			}
		}
	}
	if sessions < 5 {
		t.Errorf("found %d CLI sessions in docs/, want at least 5: the test would check nothing", sessions)
	}
	if liveSessions < 2 {
		t.Errorf("found %d live CLI sessions (status, plan dq/NAME) in docs/, want at least 2: the test would check none", liveSessions)
	}
}

// liveSession reports whether a session's arguments read the cluster:
// status, or plan with a TYPE/NAME argument.
func liveSession(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0] {
	case "status":
		return true
	case "plan":
		return len(args) > 1 && strings.Contains(args[1], "/") && !strings.HasPrefix(args[1], "-")
	}
	return false
}

// live is the control plane state the live sessions read, put there once.
var live struct {
	once       sync.Once
	kubeconfig string
	err        error
}

// liveKubeconfig returns the kubeconfig of the control plane after putting
// livefixture's objects into it on first use.
func liveKubeconfig(t *testing.T) string {
	t.Helper()
	cfg, kubectl := controlPlane(t)
	live.once.Do(func() {
		c, err := client.New(cfg, client.Options{Scheme: scheme(t)})
		if err != nil {
			live.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		live.err = livefixture.Apply(ctx, c)
		live.kubeconfig = kubectl.Kubeconfig
	})
	if live.err != nil {
		t.Fatal(live.err)
	}
	return live.kubeconfig
}

// cliSession returns the arguments of a calculator session's first line,
// "$ go run ./cmd/kubectl-backpressure ARGS" or "$ kubectl backpressure ARGS",
// unless its output goes through a pipe, which the test cannot check.
func cliSession(line string) (string, bool) {
	for _, prefix := range []string{"$ go run ./cmd/kubectl-backpressure ", "$ kubectl backpressure "} {
		if args, ok := strings.CutPrefix(line, prefix); ok && !strings.Contains(args, "|") {
			return args, true
		}
	}
	return "", false
}

// docFiles lists the README, CONTRIBUTING, SECURITY and the Markdown files
// under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md"}
	for _, f := range repoFiles(t, "docs") {
		if strings.HasSuffix(f, ".md") {
			docs = append(docs, filepath.Join("docs", f))
		}
	}
	if len(docs) < 7 {
		t.Fatalf("found %d documents under docs/: %v", len(docs), docs)
	}
	return docs
}

// fencedBlocks returns the contents of the ``` blocks of a Markdown text.
func fencedBlocks(text string) []string {
	var blocks []string
	var cur []string
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "```") {
			if in {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur = nil
			}
			in = !in
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return blocks
}

// anchors returns the GitHub anchors of the headings of a Markdown file.
func anchors(t *testing.T, file string) []string {
	t.Helper()
	var out []string
	inCode := false
	for line := range strings.SplitSeq(string(readRepoFile(t, file)), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}

// repoPathExists reports whether path, relative to the repository root,
// names a file or a directory.
func repoPathExists(path string) bool {
	_, err := os.Stat(filepath.Join(repoRoot, path))
	return err == nil
}
