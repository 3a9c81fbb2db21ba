package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(revision, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: revision}, {Key: "vcs.modified", Value: modified},
		}}
	}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped wins over build info", "v0.1.0", "abc123", vcs("def456", "true"), Info{"v0.1.0", "abc123"}},
		{"no build info", "", "", nil, Info{Dev, Unknown}},
		{"checkout build", "", "", vcs("def456", "false"), Info{Dev, "def456"}},
		{"checkout build with local changes", "", "", vcs("def456", "true"), Info{Dev, "def456-dirty"}},
		{"go install at a module version", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, Info{"v0.2.0", Unknown}},
		{"stamped version, commit from the checkout", "v0.1.0", "", vcs("def456", "false"), Info{"v0.1.0", "def456"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolve(tt.version, tt.commit, tt.bi); got != tt.want {
				t.Errorf("resolve(%q, %q, ...) = %+v, want %+v", tt.version, tt.commit, got, tt.want)
			}
		})
	}
}

func TestInfoString(t *testing.T) {
	if got, want := (Info{"v0.1.0", "abc123"}).String(), "v0.1.0 (commit abc123)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// Get reads the package variables that -ldflags -X sets.
func TestGetReadsStampedValues(t *testing.T) {
	oldVersion, oldCommit := Version, Commit
	t.Cleanup(func() { Version, Commit = oldVersion, oldCommit })
	Version, Commit = "v9.8.7", "feedface"
	if got, want := Get(), (Info{"v9.8.7", "feedface"}); got != want {
		t.Errorf("Get() = %+v, want %+v", got, want)
	}
}
