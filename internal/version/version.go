// Package version says which build of backpressure-operator is running. A
// release stamps Version and Commit into the binaries at link time
// (hack/release.sh):
//
//	go build -ldflags "-X github.com/backpressure-dev/backpressure-operator/internal/version.Version=v0.1.0 \
//	  -X github.com/backpressure-dev/backpressure-operator/internal/version.Commit=$(git rev-parse HEAD)"
//
// Other builds fall back on what the go command records in the binary: the
// module version of `go install ...@v0.1.0`, and the VCS revision of a build
// inside a git checkout.
package version

import "runtime/debug"

// Version and Commit are set with -ldflags -X; they stay empty in other
// builds, so read them through Get, which fills in the fallbacks. They are
// variables, not constants, because -X can only set package-level string
// variables.
var (
	// Version is the release, such as v0.1.0.
	Version string
	// Commit is the full git commit the release was built from.
	Commit string
)

const (
	// Dev is the version of a build that is neither stamped nor installed
	// at a module version.
	Dev = "dev"
	// Unknown is the commit of a build that is not stamped and carries no
	// VCS information.
	Unknown = "unknown"
)

// Info is a build's version and commit.
type Info struct {
	// Version is the release, or Dev.
	Version string `json:"version"`
	// Commit is the git commit, suffixed "-dirty" when the tree had local
	// changes, or Unknown.
	Commit string `json:"commit"`
}

// String is the one-line form --version prints: "v0.1.0 (commit 0123abc)".
func (i Info) String() string {
	return i.Version + " (commit " + i.Commit + ")"
}

// Get returns the running binary's version and commit.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, bi)
}

// resolve prefers the stamped values and falls back on the build info,
// which may be nil.
func resolve(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit}
	if info.Version == "" && bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Commit == "" && bi != nil {
		var revision, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if revision != "" {
			info.Commit = revision
			if modified == "true" {
				info.Commit += "-dirty"
			}
		}
	}
	if info.Version == "" {
		info.Version = Dev
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	return info
}
