package release

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// signingKey is a minisign key pair made for one test.
type signingKey struct{ secret, public string }

// minisign runs minisign, pinned in hack/tools/minisign/go.mod, from the
// repository's root and returns its combined output and error.
func minisign(t *testing.T, root string, args ...string) ([]byte, error) {
	t.Helper()
	const name = "minisign"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "-modfile=" + filepath.Join("hack", "tools", name, "go.mod"), name}, args...)...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// newSigningKey makes a minisign key pair without a password, as a release
// manager would keep one in a CI secret.
func newSigningKey(t *testing.T, root string) signingKey {
	t.Helper()
	dir := t.TempDir()
	k := signingKey{secret: filepath.Join(dir, "release.key"), public: filepath.Join(dir, "release.pub")}
	if out, err := minisign(t, root, "-G", "-W", "-s", k.secret, "-p", k.public); err != nil {
		t.Fatalf("minisign -G: %v\n%s", err, out)
	}
	return k
}

// checkSignatures verifies every file of the release against its .minisig
// with the release's public key, as a user would, and checks that the
// verification means something: a changed file, or a key of someone else,
// fails it.
func checkSignatures(t *testing.T, root, dist, public string) {
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	signed := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".minisig") {
			continue
		}
		signed++
		out, err := minisign(t, root, "-V", "-p", public, "-m", filepath.Join(dist, name))
		if err != nil {
			t.Errorf("minisign -V %s: %v\n%s", name, err, out)
			continue
		}
		// The trusted comment, signed with the file, names it.
		if !strings.Contains(string(out), "filename:"+name) {
			t.Errorf("the signature of %s names another file: %s", name, out)
		}
	}
	if signed < 8 {
		t.Fatalf("verified %d files, want every file of the release", signed)
	}

	// A file changed after signing, and a signature checked with another
	// key, fail.
	tampered := filepath.Join(t.TempDir(), "checksums.txt")
	data := append(readFile(t, filepath.Join(dist, "checksums.txt")), []byte("0000  evil.tar.gz\n")...)
	if err := os.WriteFile(tampered, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := minisign(t, root, "-V", "-p", public, "-x", filepath.Join(dist, "checksums.txt.minisig"), "-m", tampered); err == nil {
		t.Errorf("minisign verified a changed checksums.txt:\n%s", out)
	}
	other := newSigningKey(t, root)
	if out, err := minisign(t, root, "-V", "-p", other.public, "-m", filepath.Join(dist, "checksums.txt")); err == nil {
		t.Errorf("minisign verified the release with another key:\n%s", out)
	}
}

// cycloneDX is the part of a CycloneDX BOM the test reads.
type cycloneDX struct {
	BOMFormat   string `json:"bomFormat"`
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components []cdxComponent `json:"components"`
}

// cdxComponent is one component of a CycloneDX BOM.
type cdxComponent struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	PURL    string `json:"purl"`
}

// checkSBOMs reads each binary's SBOM and checks it against the binary's
// own build information, read independently here: the main module at the
// release's version, and every module the binary was built from, at the
// version it was built at, with its package URL.
func checkSBOMs(t *testing.T, dist string, platforms []platform) {
	for _, p := range platforms {
		for _, bin := range []string{manager, plugin, proxy} {
			name := p.sbomName(bin)
			var bom cycloneDX
			if err := json.Unmarshal(readFile(t, filepath.Join(dist, name)), &bom); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if bom.BOMFormat != "CycloneDX" || bom.SpecVersion == "" {
				t.Errorf("%s is %q %q, want a CycloneDX BOM", name, bom.BOMFormat, bom.SpecVersion)
			}
			bi, err := buildinfo.Read(bytes.NewReader(readArchive(t, filepath.Join(dist, p.archiveName(bin)))[bin].data))
			if err != nil {
				t.Fatalf("%s: %v", p.archiveName(bin), err)
			}
			if c := bom.Metadata.Component; c.Name != bi.Main.Path || c.Version != version {
				t.Errorf("%s describes %s %s, want %s %s", name, c.Name, c.Version, bi.Main.Path, version)
			}
			got := map[string]cdxComponent{}
			for _, c := range bom.Components {
				got[c.Name] = c
			}
			if len(bi.Deps) < 10 {
				t.Fatalf("%s was built from %d modules: the build information is not what the test expects", bin, len(bi.Deps))
			}
			for _, d := range bi.Deps {
				if d.Replace != nil {
					d = d.Replace
				}
				c, ok := got[d.Path]
				switch {
				case !ok:
					t.Errorf("%s does not list %s %s, which %s was built from", name, d.Path, d.Version, bin)
				case c.Version != d.Version || !strings.HasPrefix(c.PURL, "pkg:golang/"+d.Path+"@"+d.Version):
					t.Errorf("%s lists %s at %s (%s), the binary was built from %s", name, d.Path, c.Version, c.PURL, d.Version)
				}
			}
		}
	}
}

// statement is the part of the release's in-toto provenance the test reads.
type statement struct {
	Type    string `json:"_type"`
	Subject []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	PredicateType string `json:"predicateType"`
	Predicate     struct {
		BuildDefinition struct {
			BuildType            string            `json:"buildType"`
			ExternalParameters   map[string]string `json:"externalParameters"`
			ResolvedDependencies []struct {
				URI    string            `json:"uri"`
				Digest map[string]string `json:"digest"`
			} `json:"resolvedDependencies"`
		} `json:"buildDefinition"`
		RunDetails struct {
			Builder struct {
				ID string `json:"id"`
			} `json:"builder"`
			Metadata struct {
				StartedOn  time.Time `json:"startedOn"`
				FinishedOn time.Time `json:"finishedOn"`
			} `json:"metadata"`
		} `json:"runDetails"`
	} `json:"predicate"`
}

// checkProvenance reads provenance.intoto.json: an in-toto Statement of
// SLSA provenance whose subjects are exactly the files it vouches for (all
// but itself, the checksums and the signatures), each with its digest, built
// from the release's commit.
func checkProvenance(t *testing.T, dist string) {
	var s statement
	if err := json.Unmarshal(readFile(t, filepath.Join(dist, "provenance.intoto.json")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Type != "https://in-toto.io/Statement/v1" || s.PredicateType != "https://slsa.dev/provenance/v1" {
		t.Errorf("the provenance is a %q of %q, want an in-toto Statement v1 of SLSA provenance v1", s.Type, s.PredicateType)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, e := range entries {
		if n := e.Name(); n != "provenance.intoto.json" && n != "checksums.txt" && !strings.HasSuffix(n, ".minisig") {
			want = append(want, n)
		}
	}
	for _, sub := range s.Subject {
		got = append(got, sub.Name)
		if d := sub.Digest["sha256"]; d != sha256Hex(t, filepath.Join(dist, sub.Name)) {
			t.Errorf("the provenance gives %s the sha256 %s, not the file's", sub.Name, d)
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the provenance's subjects (-files +subjects):\n%s", diff)
	}
	b := s.Predicate.BuildDefinition
	if b.ExternalParameters["version"] != version || b.ExternalParameters["image"] != image {
		t.Errorf("the provenance's parameters are %v, want version %s and image %s", b.ExternalParameters, version, image)
	}
	if !slices.ContainsFunc(b.ResolvedDependencies, func(d struct {
		URI    string            `json:"uri"`
		Digest map[string]string `json:"digest"`
	}) bool {
		return d.Digest["gitCommit"] == commit
	}) {
		t.Errorf("the provenance's dependencies %+v do not hold the commit %s", b.ResolvedDependencies, commit)
	}
	r := s.Predicate.RunDetails
	if r.Builder.ID != "test/release" || r.Metadata.StartedOn.IsZero() || r.Metadata.FinishedOn.Before(r.Metadata.StartedOn) {
		t.Errorf("the provenance's run details are %+v, want the builder test/release and a start before the finish", r)
	}
}

// A release without a signing key is refused before anything is built.
func TestReleaseRefusesToBeUnsigned(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	for _, key := range []string{"", filepath.Join(dist, "absent.key")} {
		cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "release.sh"), version)
		cmd.Env = append(os.Environ(), "DIST="+dist, "RELEASE_SIGNING_KEY="+key)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "RELEASE_SIGNING_KEY must name the minisign secret key") {
			t.Errorf("hack/release.sh with RELEASE_SIGNING_KEY=%q: %v\n%s", key, err, out)
		}
	}
	if entries, _ := os.ReadDir(dist); len(entries) != 0 {
		t.Errorf("the refused release left %d files in DIST", len(entries))
	}
}
