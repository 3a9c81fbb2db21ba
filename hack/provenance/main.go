// Command provenance writes the provenance of a release: an in-toto
// Statement (https://in-toto.io/Statement/v1) whose subjects are the
// release's files with their SHA-256 digests and whose predicate is SLSA
// build provenance (https://slsa.dev/provenance/v1): what was built (the
// repository at a commit, the Go toolchain), how (hack/release.sh with its
// parameters), by whom and when. hack/release.sh runs it, then signs its
// output with the release's other files.
//
//	go run ./hack/provenance -version v0.1.0 -commit <sha> -started <RFC 3339> \
//	    -platforms "linux/amd64 darwin/arm64" -image <repository> -out provenance.intoto.json <file>...
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

const (
	// StatementType is the in-toto Statement version the file is.
	StatementType = "https://in-toto.io/Statement/v1"
	// PredicateType is the SLSA provenance version of the predicate.
	PredicateType = "https://slsa.dev/provenance/v1"
	// BuildType names how the release is built: hack/release.sh.
	BuildType = "https://github.com/backpressure-dev/backpressure-operator/blob/main/hack/release.sh"
	// Repository is the source repository.
	Repository = "https://github.com/backpressure-dev/backpressure-operator"
)

// Statement is an in-toto Statement carrying SLSA provenance.
type Statement struct {
	Type          string     `json:"_type"`
	Subject       []Subject  `json:"subject"`
	PredicateType string     `json:"predicateType"`
	Predicate     Provenance `json:"predicate"`
}

// Subject is one artifact the provenance is about.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// Provenance is the SLSA v1 predicate.
type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition says what was built and how.
type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]string    `json:"externalParameters"`
	InternalParameters   map[string]string    `json:"internalParameters,omitempty"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies"`
}

// ResourceDescriptor names an input of the build.
type ResourceDescriptor struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest,omitempty"`
}

// RunDetails says who built it and when.
type RunDetails struct {
	Builder  Builder  `json:"builder"`
	Metadata Metadata `json:"metadata"`
}

// Builder identifies who ran the build.
type Builder struct {
	ID string `json:"id"`
}

// Metadata holds the build's times.
type Metadata struct {
	StartedOn  string `json:"startedOn"`
	FinishedOn string `json:"finishedOn"`
}

func main() {
	if err := run(os.Args[1:], os.Stderr, time.Now); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run parses args, hashes the files they name and writes the statement.
func run(args []string, stderr io.Writer, now func() time.Time) error {
	fs := flag.NewFlagSet("provenance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.String("version", "", "The release's version.")
	commit := fs.String("commit", "", "The commit the release is built from.")
	started := fs.String("started", "", "When the build started, RFC 3339.")
	platforms := fs.String("platforms", "", "The GOOS/GOARCH pairs built, separated by spaces.")
	image := fs.String("image", "", "The manager image's repository install.yaml and the chart name.")
	builder := fs.String("builder", "", "Who ran the build: a CI job's URL, or a person; default: the user and host.")
	out := fs.String("out", "", "The file to write.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *version == "" || *commit == "" || *out == "":
		return errors.New("provenance: -version, -commit and -out are required")
	case fs.NArg() == 0:
		return errors.New("provenance: name the release's files")
	}
	start, err := time.Parse(time.RFC3339, *started)
	if err != nil {
		return fmt.Errorf("provenance: -started: %w", err)
	}
	if *builder == "" {
		host, _ := os.Hostname()
		*builder = "hack/release.sh run by " + os.Getenv("USER") + "@" + host
	}
	s := Statement{Type: StatementType, PredicateType: PredicateType}
	for _, f := range fs.Args() {
		sum, err := sha256File(f)
		if err != nil {
			return fmt.Errorf("provenance: %w", err)
		}
		s.Subject = append(s.Subject, Subject{Name: filepath.Base(f), Digest: map[string]string{"sha256": sum}})
	}
	slices.SortFunc(s.Subject, func(a, b Subject) int { return strings.Compare(a.Name, b.Name) })
	commitDigest := map[string]string{"gitCommit": strings.TrimSuffix(*commit, "-dirty")}
	s.Predicate = Provenance{
		BuildDefinition: BuildDefinition{
			BuildType: BuildType,
			ExternalParameters: map[string]string{
				"version":   *version,
				"platforms": *platforms,
				"image":     *image,
			},
			InternalParameters: map[string]string{"commit": *commit},
			ResolvedDependencies: []ResourceDescriptor{
				{URI: "git+" + Repository + "@" + *version, Digest: commitDigest},
				{URI: "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go")},
			},
		},
		RunDetails: RunDetails{
			Builder:  Builder{ID: *builder},
			Metadata: Metadata{StartedOn: start.UTC().Format(time.RFC3339), FinishedOn: now().UTC().Format(time.RFC3339)},
		},
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(data, '\n'), 0o644)
}

// sha256File returns the hex SHA-256 of the file at path.
func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
