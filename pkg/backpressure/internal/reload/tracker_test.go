package reload

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sourcetest"
)

func newTestTracker(t *testing.T) (*tracker, *prometheus.Registry, *sourcetest.LogSink) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &sourcetest.LogSink{}
	return newTracker(logs.Logger(), m), reg, logs
}

func snap(kv ...string) map[string]entry {
	s := map[string]entry{}
	for i := 0; i < len(kv); i += 2 {
		s[kv[i]] = entry{data: kv[i+1]}
	}
	return s
}

func reloads(t *testing.T, tr *tracker, result string) int {
	t.Helper()
	return int(testutil.ToFloat64(tr.metrics.reloads.WithLabelValues(result)))
}

func TestTrackerSequence(t *testing.T) {
	tr, _, logs := newTestTracker(t)
	a1, a2, a3, b1 := sourcetest.Doc("a", 1), sourcetest.Doc("a", 2), sourcetest.Doc("a", 3), sourcetest.Doc("b", 1)

	steps := []struct {
		name         string
		snapshot     map[string]entry
		wantUpdate   *Update // nil: no update
		wantSuccess  int     // cumulative reloads_total{result="success"}
		wantErrors   int     // cumulative reloads_total{result="error"}
		wantRejected int     // rejected documents returned by this step
	}{
		{"first read", snap("a.json", sourcetest.Encode(t, a1), "b.json", sourcetest.Encode(t, b1), "README", "hi"),
			&Update{Plans: map[string]plan.Document{"a": a1, "b": b1}, Changed: []string{"a", "b"}}, 2, 0, 0},
		{"same content", snap("a.json", sourcetest.Encode(t, a1), "b.json", sourcetest.Encode(t, b1)), nil, 2, 0, 0},
		{"same plan, other bytes", snap("a.json", " "+sourcetest.Encode(t, a1)+"\n", "b.json", sourcetest.Encode(t, b1)), nil, 2, 0, 0},
		{"a changes", snap("a.json", sourcetest.Encode(t, a2), "b.json", sourcetest.Encode(t, b1)),
			&Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Changed: []string{"a"}}, 3, 0, 0},
		{"a goes bad", snap("a.json", `{"version":1`, "b.json", sourcetest.Encode(t, b1)), nil, 3, 1, 1},
		{"a still bad, same bytes", snap("a.json", `{"version":1`, "b.json", sourcetest.Encode(t, b1)), nil, 3, 1, 0},
		{"a bad differently", snap("a.json", `{"version":7}`, "b.json", sourcetest.Encode(t, b1)), nil, 3, 2, 1},
		{"a out of range", snap("a.json", strings.Replace(sourcetest.Encode(t, a2), `"permits":2`, `"permits":-2`, 1), "b.json", sourcetest.Encode(t, b1)), nil, 3, 3, 1},
		{"a holds b's plan", snap("a.json", sourcetest.Encode(t, b1), "b.json", sourcetest.Encode(t, b1)), nil, 3, 4, 1},
		{"key not naming a gate", snap("a.json", sourcetest.Encode(t, b1), "b.json", sourcetest.Encode(t, b1), "Bad_Key.json", "{}"), nil, 3, 5, 1},
		{"b disappears", snap("a.json", sourcetest.Encode(t, b1)),
			&Update{Plans: map[string]plan.Document{"a": a2, "b": b1}, Orphaned: []string{"b"}}, 3, 5, 0},
		{"b still gone", snap("a.json", sourcetest.Encode(t, b1)), nil, 3, 5, 0},
		{"b back, a good again but an older revision", snap("a.json", sourcetest.Encode(t, a1), "b.json", sourcetest.Encode(t, b1)),
			&Update{Plans: map[string]plan.Document{"a": a2, "b": b1}}, 3, 6, 1},
		{"a newer", snap("a.json", sourcetest.Encode(t, a3), "b.json", sourcetest.Encode(t, b1)),
			&Update{Plans: map[string]plan.Document{"a": a3, "b": b1}, Changed: []string{"a"}}, 4, 6, 0},
		{"everything gone", snap(),
			&Update{Plans: map[string]plan.Document{"a": a3, "b": b1}, Orphaned: []string{"a", "b"}}, 4, 6, 0},
	}
	for _, st := range steps {
		u, ok, rejected := tr.apply(st.snapshot)
		if st.wantUpdate == nil {
			if ok {
				t.Errorf("%s: unexpected update %+v", st.name, u)
			}
		} else if !ok {
			t.Errorf("%s: no update, want %+v", st.name, *st.wantUpdate)
		} else if diff := cmp.Diff(*st.wantUpdate, u); diff != "" {
			t.Errorf("%s: update (-want +got):\n%s", st.name, diff)
		}
		if got := reloads(t, tr, ResultSuccess); got != st.wantSuccess {
			t.Errorf("%s: reloads{success} = %d, want %d", st.name, got, st.wantSuccess)
		}
		if got := reloads(t, tr, ResultError); got != st.wantErrors {
			t.Errorf("%s: reloads{error} = %d, want %d", st.name, got, st.wantErrors)
		}
		if len(rejected) != st.wantRejected {
			t.Errorf("%s: %d rejected, want %d: %v", st.name, len(rejected), st.wantRejected, rejected)
		}
	}
	// One log line per rejection, not per read.
	if got := logs.Count("Rejected plan document"); got != 6 {
		t.Errorf("logged %d rejections, want 6:\n%s", got, logs)
	}
	if got := logs.Count("revision 2 of epoch epoch-1 is not newer than revision 3 put in force"); got != 1 {
		t.Errorf("logged the older revision %d times, want once:\n%s", got, logs)
	}
	if got := logs.Count("disappeared"); got != 3 {
		t.Errorf("logged %d disappearances, want 3:\n%s", got, logs)
	}
}

func TestTrackerMetrics(t *testing.T) {
	tr, reg, _ := newTestTracker(t)
	a1, a2 := sourcetest.Doc("a", 1), sourcetest.Doc("a", 2)
	tr.apply(snap("a.json", sourcetest.Encode(t, a1), "b.json", sourcetest.Encode(t, sourcetest.Doc("b", 3))))
	tr.apply(snap("a.json", sourcetest.Encode(t, a2)))

	want := fmt.Sprintf(`
# HELP backpressure_config_gate_orphaned 1 when the gate's document has disappeared from the config source and the gate keeps its last plan until the process restarts, else 0.
# TYPE backpressure_config_gate_orphaned gauge
backpressure_config_gate_orphaned{gate="a"} 0
backpressure_config_gate_orphaned{gate="b"} 1
# HELP backpressure_config_plan_info The plan in force for each gate: 1 for the gate's current plan hash.
# TYPE backpressure_config_plan_info gauge
backpressure_config_plan_info{gate="a",hash="%s"} 1
backpressure_config_plan_info{gate="b",hash="%s"} 1
# HELP backpressure_config_reloads_total Plan documents read from the config source, by result: success is a new valid plan for a gate, error a rejected document (the gate keeps its last good plan) or an unreadable source.
# TYPE backpressure_config_reloads_total counter
backpressure_config_reloads_total{result="error"} 0
backpressure_config_reloads_total{result="success"} 3
`, a2.Hash, sourcetest.Doc("b", 3).Hash)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"backpressure_config_gate_orphaned", "backpressure_config_plan_info", "backpressure_config_reloads_total"); err != nil {
		t.Error(err)
	}
}

func TestTrackerSourceFailure(t *testing.T) {
	tr, _, logs := newTestTracker(t)
	tr.apply(snap("a.json", sourcetest.Encode(t, sourcetest.Doc("a", 1))))
	for range 3 {
		tr.sourceFailed(errors.New("open /etc/backpressure: permission denied"))
	}
	tr.sourceFailed(errors.New("open /etc/backpressure: no such file or directory"))
	if got := reloads(t, tr, ResultError); got != 2 {
		t.Errorf("reloads{error} = %d, want 2 (one per distinct failure)", got)
	}
	if got := logs.Count("Could not read the config source"); got != 2 {
		t.Errorf("logged %d failures, want 2", got)
	}
	if _, ok := tr.plansCopy()["a"]; !ok {
		t.Error("a source failure dropped a plan")
	}
	// Reading again clears the failure, so the same failure later is new.
	tr.apply(snap("a.json", sourcetest.Encode(t, sourcetest.Doc("a", 1))))
	tr.sourceFailed(errors.New("open /etc/backpressure: no such file or directory"))
	if got := reloads(t, tr, ResultError); got != 3 {
		t.Errorf("reloads{error} = %d, want 3", got)
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m1, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("second source on the same registry: %v", err)
	}
	m1.reloads.WithLabelValues(ResultSuccess).Inc()
	m2.reloads.WithLabelValues(ResultSuccess).Inc()
	if got := testutil.ToFloat64(m1.reloads.WithLabelValues(ResultSuccess)); got != 2 {
		t.Errorf("shared counter = %v, want 2", got)
	}
	if _, err := newMetrics(nil); err != nil {
		t.Errorf("nil registerer: %v", err)
	}
}

func TestInitialError(t *testing.T) {
	err := initialError("directory /x", nil)
	if !errors.Is(err, ErrNoPlan) || !strings.Contains(err.Error(), "<gate>.json") {
		t.Errorf("got %v", err)
	}
	err = initialError("directory /x", []error{&plan.FieldError{Field: "permits", Detail: "required"}})
	var fe *plan.FieldError
	if !errors.Is(err, ErrNoPlan) || !errors.As(err, &fe) {
		t.Errorf("got %v, want ErrNoPlan wrapping the field error", err)
	}
}

// "Loaded plan" says what the document holds, the pods it names and the
// base share of the pods it does not, and never a "permits" that a pod's
// own "Applied plan" line would contradict: a document naming two pods of
// 4 permits has a base share of 0.
func TestLoadedPlanLogsTheBaseShare(t *testing.T) {
	tr, _, logs := newTestTracker(t)
	d := sourcetest.Doc("a", 0)
	d.RetryBudgetPerSecond = 0
	d.Pods = map[string]plan.PodShare{"gateway-1": {Permits: 4, Workers: 4}, "gateway-2": {Permits: 4, Workers: 4}}
	d.Hash = plan.Hash(d)
	if _, ok, rejected := tr.apply(snap("a.json", sourcetest.Encode(t, d))); !ok || len(rejected) > 0 {
		t.Fatalf("the document was not loaded: %v", rejected)
	}
	line := logs.String()
	for _, want := range []string{`"msg"="Loaded plan"`, `"podsNamed"=2`, `"basePermits"=0`} {
		if !strings.Contains(line, want) {
			t.Errorf("the log lacks %s:\n%s", want, line)
		}
	}
	if strings.Contains(line, `"permits"=`) {
		t.Errorf("the log says permits of a document that gives each of its pods 4:\n%s", line)
	}
}

// TestTrackerRemembersTheRevisionsOfEachEpoch switches a gate from one
// epoch to another and back, as a quota moved to a shared contract and back
// to its own division does: a late copy of the first epoch's older document
// is refused, and the first epoch's new revisions, which the operator
// starts above the old ones, are taken.
func TestTrackerRemembersTheRevisionsOfEachEpoch(t *testing.T) {
	tr, _, _ := newTestTracker(t)
	at := func(epoch string, rev int64, permits int) plan.Document {
		d := sourcetest.Doc("a", permits)
		d.Epoch, d.Revision = epoch, rev
		d.Hash = plan.Hash(d)
		return d
	}
	for _, st := range []struct {
		name    string
		d       plan.Document
		inForce plan.Document
	}{
		{"own division", at("own", 5, 2), at("own", 5, 2)},
		{"the contract's", at("contract", 2, 1), at("contract", 2, 1)},
		{"a late copy of the own division's older document", at("own", 4, 9), at("contract", 2, 1)},
		{"the own division's revision seen before, other content", at("own", 5, 9), at("contract", 2, 1)},
		{"the own division again, above its old revisions", at("own", 1767225600001, 3), at("own", 1767225600001, 3)},
	} {
		tr.apply(snap("a.json", sourcetest.Encode(t, st.d)))
		if got := tr.plansCopy()["a"]; !plan.Equal(got, st.inForce) {
			t.Errorf("%s: in force epoch %s revision %d, want epoch %s revision %d", st.name, got.Epoch, got.Revision, st.inForce.Epoch, st.inForce.Revision)
		}
	}
}
