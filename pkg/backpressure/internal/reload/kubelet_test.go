package reload

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// volume writes a directory the way the kubelet's AtomicWriter updates a
// ConfigMap volume: the files live in a timestamped "..<ts>" directory, the
// "..data" symlink points at it, and each key is a symlink "<key>" →
// "..data/<key>". An update writes a new timestamped directory, points a
// "..data_tmp" symlink at it, renames that over "..data", adds and removes
// the per-key symlinks, and removes the old directory.
type volume struct {
	t    testing.TB
	dir  string
	cur  string   // current timestamped directory name
	keys []string // current keys
	n    int
}

func newVolume(t testing.TB, files map[string]string) *volume {
	v := &volume{t: t, dir: filepath.Join(t.TempDir(), "plans")}
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.write(files)
	return v
}

func (v *volume) write(files map[string]string) {
	t := v.t
	t.Helper()
	v.n++
	ts := fmt.Sprintf("..%s.%09d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.n)
	if err := os.Mkdir(filepath.Join(v.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, data := range files {
		if err := os.WriteFile(filepath.Join(v.dir, ts, k), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for k := range files {
		link := filepath.Join(v.dir, k)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range v.keys {
		if _, still := files[k]; !still {
			if err := os.Remove(filepath.Join(v.dir, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v.cur != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, v.cur)); err != nil {
			t.Fatal(err)
		}
	}
	v.cur = ts
	v.keys = slices.Sorted(maps.Keys(files))
}
