package release

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// vulnDB writes a vulnerability database, in the layout vuln.go.dev serves,
// holding one made-up vulnerability in a function of a module the project
// calls everywhere: logr's Logger.Info.
func vulnDB(t *testing.T) string {
	t.Helper()
	const id, modified = "GO-2099-0001", "2026-11-30T00:00:00Z"
	files := map[string]string{
		"index/db.json":      `{"modified":"` + modified + `"}`,
		"index/modules.json": `[{"path":"github.com/go-logr/logr","vulns":[{"id":"` + id + `","modified":"` + modified + `"}]}]`,
		"index/vulns.json":   `[{"id":"` + id + `","modified":"` + modified + `","aliases":[]}]`,
		"ID/" + id + ".json": `{"schema_version":"1.3.1","id":"` + id + `","modified":"` + modified + `","published":"` + modified + `",
			"summary":"A vulnerability the test makes up","details":"Logger.Info is vulnerable, for the test's sake.",
			"database_specific":{"url":"https://pkg.go.dev/vuln/` + id + `"},
			"affected":[{"package":{"name":"github.com/go-logr/logr","ecosystem":"Go"},
			"ranges":[{"type":"SEMVER","events":[{"introduced":"0"}]}],
			"ecosystem_specific":{"imports":[{"path":"github.com/go-logr/logr","symbols":["Logger.Info"]}]}}]}`,
	}
	dir := t.TempDir()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hack/govulncheck.sh, which make lint runs, fails on a vulnerability the
// code reaches, read from the local database GOVULNDB_DIR names; without
// one, and without vuln.go.dev, it skips with one line instead of failing
// for want of the network.
func TestGovulncheck(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "govulncheck.sh"))
		cmd.Dir = root
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	t.Run("a vulnerability in the local database", func(t *testing.T) {
		out, err := run("GOVULNDB_DIR=" + vulnDB(t))
		if err == nil {
			t.Fatalf("govulncheck passed with a vulnerability in a function the code calls:\n%s", out)
		}
		if !strings.Contains(out, "GO-2099-0001") || !strings.Contains(out, "logr.Logger.Info") {
			t.Errorf("govulncheck failed without naming the vulnerability: %v\n%s", err, out)
		}
	})
	t.Run("no database at all", func(t *testing.T) {
		if reachable := exec.CommandContext(t.Context(), "timeout", "10", "bash", "-c", "</dev/tcp/vuln.go.dev/443").Run() == nil; reachable {
			t.Skip("vuln.go.dev is reachable: the script checks against it, which make lint does")
		}
		out, err := run("GOVULNDB_DIR=")
		if err != nil || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "govulncheck: skipped: vuln.go.dev is not reachable") {
			t.Errorf("offline, the script returned %v and printed %q, want one line saying it skipped", err, out)
		}
	})
}
