package reload_test

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

// TestConfigMapReloadLatency measures, over 100 updates of a ConfigMap on a
// local API server, the time from the update request to the new plan
// reaching the subscriber. It reports the median and p99 and asserts no
// timing: the figure depends on the machine.
func TestConfigMapReloadLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("measures 100 updates on a local API server")
	}
	const updates = 100
	client, ns := testNamespace(t)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, sourcetest.ConfigMap("plans", map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", 1))}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		permits int
		at      time.Time
	}
	got := make(chan delivery, updates+1)
	s, err := reload.NewConfigMapSource(ctx, client, ns, "plans", reload.Options{Subscriber: func(u reload.Update) {
		got <- delivery{u.Plans["a"].Permits, time.Now()}
	}})
	if err != nil {
		t.Fatal(err)
	}
	sourcetest.Start(t, s.Start)
	if d := <-got; d.permits != 1 {
		t.Fatalf("first plan has %d permits", d.permits)
	}

	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, "plans", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	latencies := make([]time.Duration, 0, updates)
	for i := range updates {
		want := i + 2
		cm.Data = map[string]string{"a.json": sourcetest.Encode(t, sourcetest.Doc("a", want))}
		start := time.Now()
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if d.permits != want {
				t.Fatalf("update %d delivered %d permits, want %d", i, d.permits, want)
			}
			latencies = append(latencies, d.at.Sub(start))
		case <-time.After(10 * time.Second):
			t.Fatalf("update %d was not delivered", i)
		}
	}
	slices.Sort(latencies)
	t.Logf("ConfigMap update to delivery over %d updates: median %v, p99 %v, max %v",
		updates, latencies[updates/2-1], latencies[updates*99/100-1], latencies[updates-1])
}
