package sourcetest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Volume writes a directory the way the kubelet's AtomicWriter updates a
// ConfigMap volume: the files live in a timestamped "..<ts>" directory, the
// "..data" symlink points at it, and each key is a symlink "<key>" →
// "..data/<key>". An update writes a new timestamped directory, points a
// "..data_tmp" symlink at it, renames that over "..data", adds and removes
// the per-key symlinks, and removes the old directory.
type Volume struct {
	// Dir is the volume's mount point.
	Dir  string
	t    testing.TB
	cur  string   // current timestamped directory name
	keys []string // current keys
	n    int
}

// NewVolume returns a volume in a temporary directory holding files, key
// to content.
func NewVolume(t testing.TB, files map[string]string) *Volume {
	v := &Volume{t: t, Dir: filepath.Join(t.TempDir(), "plans")}
	if err := os.Mkdir(v.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.Write(files)
	return v
}

// Write replaces the volume's files with files, as one atomic update.
func (v *Volume) Write(files map[string]string) {
	t := v.t
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.n)
	if err := os.Mkdir(filepath.Join(v.Dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, data := range files {
		if err := os.WriteFile(filepath.Join(v.Dir, ts, k), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range files {
		link := filepath.Join(v.Dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range v.keys {
		if _, still := files[k]; !still {
			if err := os.Remove(filepath.Join(v.Dir, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.Dir, v.cur)); err != nil {
			t.Fatal(err)
		}
	}
	v.cur = ts
	v.keys = slices.Sorted(maps.Keys(files))
}

// Forget makes the volume forget the files it wrote, for a test that has
// removed the directory and made it again: the next Write starts afresh.
func (v *Volume) Forget() { v.cur, v.keys = "", nil }
