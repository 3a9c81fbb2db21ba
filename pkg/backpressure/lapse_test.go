package backpressure_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// lapsingDoc is sharetest.Doc with the operator's unacknowledged delay, so
// that a gate that does not acknowledge may lapse.
func lapsingDoc(permits int) plan.Document {
	d := sharetest.Doc("logistics-api", permits)
	d.UnacknowledgedDelaySeconds = 60
	d.Hash = plan.Hash(d)
	return d
}

// appliedLine is what an "Applied plan" line says.
type appliedLine struct {
	Hash    string
	Permits int
}

// appliedLines returns the "Applied plan" lines of a JSON log, in order.
func appliedLines(t *testing.T, log string) []appliedLine {
	t.Helper()
	var out []appliedLine
	for line := range strings.Lines(log) {
		var m struct {
			Msg     string `json:"msg"`
			Gate    string `json:"gate"`
			Hash    string `json:"hash"`
			Permits *int   `json:"permits"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m.Msg != "Applied plan" {
			continue
		}
		if m.Gate != "logistics-api" || m.Hash == "" || m.Permits == nil {
			t.Fatalf("Applied plan line without its gate, hash or permits: %s", line)
		}
		out = append(out, appliedLine{m.Hash, *m.Permits})
	}
	return out
}

// A lapse and its end change the permits in force without a new plan: each
// is logged as "Applied plan" with the plan's hash and the permits then in
// force, so that those lines alone always tell what the gate enforces,
// here for a plan that arrives while the gate has lapsed and is put in
// force once the source confirms it. OnApplied reports plans only.
func TestLapseAndItsEndAreLoggedAsAppliedPlans(t *testing.T) {
	dir := t.TempDir()
	first, second := lapsingDoc(4), lapsingDoc(6)
	sharetest.WritePlan(t, dir, first)
	var logs syncBuffer
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Logger:            logr.FromSlogHandler(slog.NewJSONHandler(&logs, nil)),
		OnApplied:         events.Hook,
		SourceLapseMargin: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	g := sharetest.MustGate(t, rt, "logistics-api")

	// Unconfirmed for the delay: past the limit of 60 s less the margin and
	// the deadline.
	now := time.Now()
	rt.CheckLapses(now, false, now.Add(-time.Minute))
	if got := g.Limits().Permits; got != 0 {
		t.Fatalf("lapsed gate enforces %d permits, want 0", got)
	}
	sharetest.Start(t, rt)
	sharetest.WritePlan(t, dir, second)
	if x := events.Next(t); x.Share.Hash != second.Hash {
		t.Fatalf("applied %s, want the second plan %s", x.Share.Hash, second.Hash)
	}
	if got := g.Limits().Permits; got != 0 {
		t.Fatalf("lapsed gate enforces %d permits after a new plan, want 0", got)
	}
	rt.CheckLapses(time.Now(), true, time.Now())
	if got := g.Limits().Permits; got != 6 {
		t.Fatalf("restored gate enforces %d permits, want 6", got)
	}
	events.Quiet(t, 100*time.Millisecond)

	want := []appliedLine{{first.Hash, 4}, {first.Hash, 0}, {second.Hash, 0}, {second.Hash, 6}}
	if diff := cmp.Diff(want, appliedLines(t, logs.String())); diff != "" {
		t.Errorf("Applied plan lines (-want +got):\n%s\nlog:\n%s", diff, logs.String())
	}
	for _, line := range []string{"Plan source has not confirmed the plan", "Plan source confirms the plan again"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("the log has no %q:\n%s", line, logs.String())
		}
	}
}
