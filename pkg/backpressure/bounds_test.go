package backpressure_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

func TestPlanBoundsAreTheGates(t *testing.T) {
	if plan.MaxPermits != gate.MaxPermits {
		t.Errorf("plan.MaxPermits = %d, gate.MaxPermits = %d: a valid plan must be one a gate enforces", plan.MaxPermits, gate.MaxPermits)
	}
}

// A published document that would start 2³¹−1 dispatcher goroutines is
// rejected: the pod keeps its last good plan, counts the rejection in
// backpressure_config_reloads_total{result="error"} and logs it naming the
// field.
func TestOutOfMemoryDocumentKeepsTheLastGoodPlan(t *testing.T) {
	dir := t.TempDir()
	good := sharetest.Doc("search", 2)
	sharetest.WritePlan(t, dir, good)
	reg := prometheus.NewPedanticRegistry()
	var logs syncBuffer
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Dispatchers: []string{"search"},
		Registerer:  reg,
		Logger:      logr.FromSlogHandler(slog.NewJSONHandler(&logs, nil)),
		OnApplied:   events.Hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	sharetest.Start(t, rt)

	data, err := plan.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), `"workers":2`, `"workers":2147483647`, 1)
	if bad == string(data) {
		t.Fatalf("the document has no workers field to change: %s", data)
	}
	sharetest.WriteFile(t, dir, plan.KeyFor("search"), []byte(bad))

	reloads := `
# HELP backpressure_config_reloads_total Plan documents read from the config source, by result: success is a new valid plan for a gate, error a rejected document (the gate keeps its last good plan) or an unreadable source.
# TYPE backpressure_config_reloads_total counter
backpressure_config_reloads_total{result="error"} 1
backpressure_config_reloads_total{result="success"} 1
`
	sharetest.Eventually(t, 10*time.Second, "the rejection is counted", func() bool {
		return testutil.CollectAndCompare(reg, strings.NewReader(reloads), "backpressure_config_reloads_total") == nil
	})
	if err := testutil.CollectAndCompare(reg, strings.NewReader(reloads), "backpressure_config_reloads_total"); err != nil {
		t.Error(err)
	}
	events.Quiet(t, 100*time.Millisecond)
	if got := sharetest.MustShare(t, rt, "search"); got != backpressure.ShareOf(good) {
		t.Errorf("Share after the bad document = %+v, want the last good one", got)
	}
	if diff := cmp.Diff(dispatch.Limits{Workers: 2, QueueCapacity: 4}, sharetest.MustDispatcher(t, rt, "search").Stats().Limits); diff != "" {
		t.Errorf("dispatcher limits after the bad document (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(backpressure.GateLimits(good), sharetest.MustGate(t, rt, "search").Limits()); diff != "" {
		t.Errorf("gate limits after the bad document (-want +got):\n%s", diff)
	}
	log := logs.String()
	if !strings.Contains(log, "Rejected plan document; the gate keeps its last good plan") ||
		!strings.Contains(log, "workers: must be in [0, 1048575], got 2147483647") || !strings.Contains(log, good.Hash) {
		t.Errorf("the log does not say the document was rejected for its workers and which plan is kept:\n%s", log)
	}
}
