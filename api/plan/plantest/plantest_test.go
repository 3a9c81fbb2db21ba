package plantest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

func TestMakeDocumentIsValid(t *testing.T) {
	d := plantest.MakeDocument("logistics-api").Obj()
	if err := plan.Validate(d); err != nil {
		t.Fatal(err)
	}
	if d.Hash != plan.Hash(d) || d.Gate != "logistics-api" || d.Permits != 1 || d.Revision < 1 {
		t.Errorf("MakeDocument(...).Obj() = %+v", d)
	}
}

// Documents that differ are distinct revisions, as the operator publishes
// them; the same document built twice is the same revision; a revision
// set is kept.
func TestObjRevision(t *testing.T) {
	two := plantest.MakeDocument("g").Permits(2).Obj()
	if again := plantest.MakeDocument("g").Permits(2).Obj(); again.Revision != two.Revision || again.Hash != two.Hash {
		t.Errorf("the same document built twice: revisions %d and %d", two.Revision, again.Revision)
	}
	seen := map[int64]int{}
	for n := range 200 {
		d := plantest.MakeDocument("g").Permits(n).Obj()
		if m, dup := seen[d.Revision]; dup {
			t.Fatalf("permits %d and %d: the same revision %d", m, n, d.Revision)
		}
		seen[d.Revision] = n
	}
	if d := plantest.MakeDocument("g").Revision(7).Obj(); d.Revision != 7 || plan.AckFor(d).String() != "e1/7" {
		t.Errorf("Revision(7): %d, ack %s", d.Revision, plan.AckFor(d))
	}
}

func TestSetters(t *testing.T) {
	d := plantest.MakeDocument("g").Downstream("logistics.example.com").Epoch("epoch-1").Revision(3).
		Permits(4).Workers(2).Rate(5, 1).Queue(8, time.Second).AcquireTimeout(200*time.Millisecond).
		Latency(50*time.Millisecond).Deadline(2*time.Second).RetryBudget(1.5).
		Pod("p-0", plan.PodShare{Permits: 3, QueueCapacity: 6, Workers: 1, RetryBudgetPerSecond: 1}).Obj()
	want := plan.Document{
		Version: plan.CurrentVersion, Gate: "g", Downstream: "logistics.example.com", Generation: 1, Epoch: "epoch-1", Revision: 3,
		Permits: 4, Workers: 2, RatePerSecond: 5, Burst: 1, QueueCapacity: 8, MaxQueueWaitSeconds: 1, AcquireTimeoutSeconds: 0.2,
		LatencySeconds: 0.05, DeadlineSeconds: 2, RetryBudgetPerSecond: 1.5,
		Pods: map[string]plan.PodShare{"p-0": {Permits: 3, QueueCapacity: 6, Workers: 1, RetryBudgetPerSecond: 1}},
	}
	want.Hash = plan.Hash(want)
	if !plan.Equal(d, want) || d.Hash != want.Hash {
		t.Errorf("built %+v\nwant  %+v", d, want)
	}
}

func TestObjPanicsOnAnInvalidDocument(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "burst") {
			t.Errorf("recovered %v, want a panic naming the burst", r)
		}
	}()
	plantest.MakeDocument("g").Rate(5, 0).Obj()
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	d := plantest.MakeDocument("logistics-api").Permits(3).Obj()
	plantest.Write(t, dir, d)
	b, err := os.ReadFile(filepath.Join(dir, "logistics-api.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := plan.Parse(b)
	if err != nil || !plan.Equal(got, d) {
		t.Errorf("read back %+v, %v; want %+v", got, err, d)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want the document alone", len(entries))
	}
}
