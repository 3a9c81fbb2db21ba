package release

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// stage is one stage of the Dockerfile, as far as the test needs it.
type stage struct {
	from   string      // the image or the stage it starts from
	copies [][2]string // COPY source and destination, from the build context
	froms  []string    // COPY --from=<stage> sources
	args   []string    // ARG names
	runs   []string    // RUN commands, continuation lines joined
}

// parseDockerfile reads the stages of a Dockerfile by name. It knows the
// instructions the project's Dockerfile uses and no more.
func parseDockerfile(t *testing.T, path string) map[string]*stage {
	t.Helper()
	text := strings.ReplaceAll(string(readFile(t, path)), "\\\n", " ")
	stages := map[string]*stage{}
	var cur *stage
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			args := f[1:]
			if strings.HasPrefix(args[0], "--platform=") {
				args = args[1:]
			}
			if len(args) != 3 || !strings.EqualFold(args[1], "AS") {
				t.Fatalf("%s: a stage without a name: %s", path, line)
			}
			cur = &stage{from: args[0]}
			stages[args[2]] = cur
		case "COPY":
			if from, ok := strings.CutPrefix(f[1], "--from="); ok {
				cur.froms = append(cur.froms, from+":"+f[2])
				continue
			}
			for _, src := range f[1 : len(f)-1] {
				cur.copies = append(cur.copies, [2]string{src, f[len(f)-1]})
			}
		case "ARG":
			cur.args = append(cur.args, f[1])
		case "RUN":
			cur.runs = append(cur.runs, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), f[0])))
		}
	}
	return stages
}

// The images cannot be built here (no container engine), so the test does
// what their builder stages do: each stage's go build runs as the
// Dockerfile writes it, with the build arguments the make targets pass, in
// a directory that holds only what the stage (and the stages it starts
// from) copies out of the build context .dockerignore leaves. A package the binary needs but the stage does not copy
// fails the build, as it would in docker build; the binaries must then say
// the version and commit they were given, and the final stages must copy
// what the builders produced.
func TestDockerfileStagesBuild(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	ignore := dockerignore(t, root)
	for _, c := range []struct{ builder, final, bin string }{
		{"builder", "manager", manager},
		{"proxy-builder", "proxy", proxy},
		{"broker-builder", "broker", broker},
	} {
		t.Run(c.final, func(t *testing.T) {
			if stages[c.builder] == nil || stages[c.final] == nil {
				t.Fatalf("the Dockerfile has no stage %s or %s", c.builder, c.final)
			}
			work := t.TempDir()
			var chain []*stage // the builder and the stages it starts from
			for s := stages[c.builder]; s != nil; s = stages[s.from] {
				chain = append([]*stage{s}, chain...)
			}
			var builds []string
			env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly",
				"TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH, "VERSION="+version, "COMMIT="+commit)
			for _, s := range chain {
				for _, cp := range s.copies {
					// A destination that ends in / is a directory, as in
					// docker build, whether or not it exists yet.
					if strings.HasSuffix(cp[1], "/") {
						if err := os.MkdirAll(filepath.Join(work, cp[1]), 0o755); err != nil {
							t.Fatal(err)
						}
					}
					copyInto(t, ignore, filepath.Join(root, cp[0]), filepath.Join(work, cp[1]), cp[0])
				}
				for _, run := range s.runs {
					// go mod download fetches what the module cache
					// already holds; only the builds are run.
					if strings.Contains(run, "go build") {
						builds = append(builds, run)
					}
				}
			}
			if len(builds) != 1 {
				t.Fatalf("stage %s: %d go build commands, want 1", c.builder, len(builds))
			}
			for _, want := range []string{"VERSION", "COMMIT"} {
				if !strings.Contains(strings.Join(stages[c.builder].args, " "), want) {
					t.Errorf("stage %s declares no ARG %s", c.builder, want)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", builds[0])
			cmd.Dir, cmd.Env = work, env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stage %s: %s: %v\n%s", c.builder, builds[0], err, out)
			}
			if len(stages[c.final].froms) != 1 || stages[c.final].froms[0] != c.builder+":/workspace/"+c.bin {
				t.Fatalf("stage %s copies %v, want %s:/workspace/%s", c.final, stages[c.final].froms, c.builder, c.bin)
			}
			checkVersionFlag(t, c.bin, readFile(t, filepath.Join(work, c.bin)))
		})
	}
}

// copyInto copies the file or directory src (name, relative to the build
// context) to dst as COPY does: a directory's contents go into dst, a file
// copied to a directory keeps its name, and what .dockerignore (ignore)
// leaves out of the build context is not there to copy.
func copyInto(t *testing.T, ignore *patternmatcher.PatternMatcher, src, dst, name string) {
	t.Helper()
	info, err := os.Stat(src)
	if err != nil {
		t.Fatalf("COPY %s: %v", name, err)
	}
	if !info.IsDir() {
		if d, err := os.Stat(dst); err == nil && d.IsDir() {
			dst = filepath.Join(dst, filepath.Base(src))
		}
	}
	copied := 0
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(src), path)
		if err != nil {
			return err
		}
		inContext := filepath.ToSlash(filepath.Join(filepath.Dir(name), rel))
		if excluded, err := ignore.MatchesOrParentMatches(inContext); err != nil || excluded {
			return err
		}
		to := dst
		if info.IsDir() {
			within, err := filepath.Rel(src, path)
			if err != nil {
				return err
			}
			to = filepath.Join(dst, within)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		copied++
		return os.WriteFile(to, readFile(t, path), 0o644)
	})
	if err != nil {
		t.Fatalf("COPY %s: %v", name, err)
	}
	if copied == 0 {
		t.Fatalf("COPY %s: .dockerignore leaves it out of the build context", name)
	}
}

// dockerignore reads the build context's .dockerignore as docker does.
func dockerignore(t *testing.T, root string) *patternmatcher.PatternMatcher {
	t.Helper()
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	return pm
}

// pinnedImage is an image reference with a tag and the digest of what the
// tag named when it was pinned.
var pinnedImage = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)

// Every base image of the Dockerfile is pinned by digest, beside the tag it
// was taken from, so that a build takes the images that were reviewed and
// not whatever the tag names that day. A FROM that names an earlier stage
// is not an image.
func TestDockerfileBasesArePinned(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(readFile(t, filepath.Join(root, "Dockerfile"))), "\\\n", " ")
	stages := map[string]bool{}
	bases := 0
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		args := f[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			args = args[1:]
		}
		if len(args) == 0 {
			t.Fatalf("Dockerfile: FROM without an image: %s", line)
		}
		if !stages[args[0]] {
			bases++
			if !pinnedImage.MatchString(args[0]) {
				t.Errorf("Dockerfile: FROM %s is not pinned: want <image>:<tag>@sha256:<digest>", args[0])
			}
		}
		if len(args) == 3 && strings.EqualFold(args[1], "AS") {
			stages[args[2]] = true
		}
	}
	if bases < 2 {
		t.Errorf("found %d base images in the Dockerfile, want the builder's and the runtime's", bases)
	}
}
