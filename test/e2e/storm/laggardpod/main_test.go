//go:build unix

package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The harness gives the laggard examples/gateway's command line and
// --apply-delay; the gateway gets its command line back with --plan-dir
// in place of the ConfigMap's flags, --kubeconfig kept to acknowledge.
func TestParseTakesTheGatewaysCommandLine(t *testing.T) {
	c, err := parse([]string{"--listen", "127.0.0.1:0", "--downstream", "http://127.0.0.1:1", "--gate", "logistics-api",
		"--apply-delay", "5s", "--metrics-listen", "127.0.0.1:0", "--configmap", "cm", "--namespace=ns",
		"--kubeconfig", "/k", "--acknowledge", "--max-retries", "1", "--retry-on-429"})
	if err != nil {
		t.Fatal(err)
	}
	if c.configMap != "cm" || c.namespace != "ns" || c.kubeconfig != "/k" || c.delay != 5*time.Second {
		t.Errorf("config %+v", c)
	}
	want := []string{"--listen", "127.0.0.1:0", "--downstream", "http://127.0.0.1:1", "--gate", "logistics-api",
		"--metrics-listen", "127.0.0.1:0", "--kubeconfig", "/k", "--acknowledge", "--max-retries", "1", "--retry-on-429"}
	if diff := cmp.Diff(want, c.gatewayArgs); diff != "" {
		t.Errorf("gateway's arguments (-want +got):\n%s", diff)
	}
	for _, bad := range [][]string{
		{"--configmap", "cm", "--namespace", "ns", "--kubeconfig", "/k"},                         // no delay
		{"--configmap", "cm", "--namespace", "ns", "--kubeconfig", "/k", "--apply-delay", "-1s"}, // not positive
		{"--plan-dir", "/d", "--apply-delay", "1s"},                                              // no ConfigMap
		{"--configmap", "cm", "--namespace", "ns", "--kubeconfig", "/k", "--apply-delay"},        // no value
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted it", bad)
		}
	}
}

// write is one version the mirror wrote, and when.
type write struct {
	data map[string]string
	at   time.Time
}

// The first version is written before follow returns; every later one
// delay after it changed, in order, also when two wait at once; a key the
// ConfigMap loses loses its file.
func TestMirrorWritesEveryLaterVersionLate(t *testing.T) {
	const delay = 400 * time.Millisecond
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plans", Namespace: "shop"}, Data: map[string]string{"a.json": "1"}}
	client := fake.NewClientset(cm)
	var mu sync.Mutex
	var writes []write
	m := &mirror{dir: t.TempDir(), delay: delay, written: func(data map[string]string) {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, write{data, time.Now()})
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := m.follow(ctx, client, "shop", "plans")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	if got := readFile(t, m.dir, "a.json"); got != "1" {
		t.Fatalf("a.json = %q when follow returned, want the first version", got)
	}

	update := func(data map[string]string) time.Time {
		t.Helper()
		c := cm.DeepCopy()
		c.Data = data
		at := time.Now()
		if _, err := client.CoreV1().ConfigMaps("shop").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	changed := []time.Time{update(map[string]string{"a.json": "2"})}
	time.Sleep(delay / 4) // both versions wait at once
	changed = append(changed, update(map[string]string{"a.json": "3"}))
	time.Sleep(delay / 4)
	if got := readFile(t, m.dir, "a.json"); got != "1" {
		t.Errorf("a.json = %q before the delay passed, want the first version", got)
	}
	changed = append(changed, update(map[string]string{"b.json": "4"}))

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(writes)
		mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d versions written within 10s, want 4", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var order []string
	for i, w := range writes {
		order = append(order, w.data["a.json"]+w.data["b.json"])
		if i > 0 && w.at.Sub(changed[i-1]) < delay {
			t.Errorf("version %d written %v after it changed, want at least %v", i+1, w.at.Sub(changed[i-1]), delay)
		}
	}
	if diff := cmp.Diff([]string{"1", "2", "3", "4"}, order); diff != "" {
		t.Errorf("versions written (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"b.json"}) || readFile(t, m.dir, "b.json") != "4" {
		t.Errorf("directory holds %v, want only b.json with the last version", names)
	}
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
