package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

func TestDocument(t *testing.T) {
	q := builders.DesignQuota().Obj()
	p, err := Size(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	// A document that gives every pod the same share (a hand-written one):
	// the base share is the sizing's share at 5 permits.
	div := Shares{Epoch: "0f1e-uid", Revision: 7, Base: 5}
	got := p.Document(q.Name, q.Spec.Downstream, q.Generation, div)
	want := plan.Document{
		Version: plan.CurrentVersion, Gate: "logistics-api", Downstream: "logistics.example.com", Generation: 3,
		Epoch: "0f1e-uid", Revision: 7,
		Permits: 5, QueueCapacity: 2, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5, RetryBudgetPerSecond: 1.25,
	}
	want.Hash = plan.Hash(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Document (-want +got):\n%s", diff)
	}
	if _, err := plan.Marshal(got); err != nil {
		t.Errorf("Marshal(Document): %v", err)
	}

	q.Generation = 4
	if again := p.Document(q.Name, q.Spec.Downstream, q.Generation, div); again.Hash != got.Hash || again.Generation != 4 {
		t.Errorf("a new generation of the same sizing: hash %s generation %d, want hash %s generation 4", again.Hash, again.Generation, got.Hash)
	}
	div.Revision = 8
	if again := p.Document(q.Name, q.Spec.Downstream, q.Generation, div); again.Hash == got.Hash {
		t.Errorf("a new revision has the same hash %s", got.Hash)
	}
}

func TestDocumentNamesPods(t *testing.T) {
	q := builders.DesignQuota().Obj()
	q.Spec.Demand = nil
	// 40 over 7 pods: five at 6 permits, two at 5; the operator names them
	// and gives a pod it does not name nothing.
	p, err := Size(q.Spec, 7)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]int{"gw-a": 6, "gw-b": 6, "gw-c": 6, "gw-d": 6, "gw-e": 6, "gw-f": 5, "gw-g": 5}
	got := p.Document(q.Name, q.Spec.Downstream, q.Generation, Shares{Epoch: "e", Revision: 1, Pods: pods})
	if got.Permits != 0 || got.Workers != 0 || got.QueueCapacity != 0 || got.RetryBudgetPerSecond != 0 {
		t.Errorf("base share = %d permits, %d workers, queue %d, retries %v; want nothing for a pod not named",
			got.Permits, got.Workers, got.QueueCapacity, got.RetryBudgetPerSecond)
	}
	if len(got.Pods) != len(pods) {
		t.Fatalf("document names %d pods, want %d", len(got.Pods), len(pods))
	}
	// Each pod's share is the sizing's ShareFor its permits, and the retry
	// budget is handed out in full: 10/s × 6/40 and 10/s × 5/40.
	var permits int
	var retries float64
	for name, n := range pods {
		s, want := got.Pods[name], p.Result.ShareFor(n)
		if s != want.PodShare {
			t.Errorf("pod %s: share %+v, want ShareFor(%d) = %+v", name, s, n, want)
		}
		permits += s.Permits
		retries += s.RetryBudgetPerSecond
	}
	if permits != 40 || retries < 10-1e-9 || retries > 10+1e-9 {
		t.Errorf("pods hold %d permits and %v retries/s, want 40 and 10", permits, retries)
	}
	if got.Pods["gw-a"].Permits != 6 || got.Pods["gw-a"].QueueCapacity != 2 || got.Pods["gw-a"].RetryBudgetPerSecond != 1.5 {
		t.Errorf("gw-a = %+v, want 6 permits, queue floor(6 × 100ms/220ms) = 2, 1.5 retries/s", got.Pods["gw-a"])
	}
	if _, err := plan.Marshal(got); err != nil {
		t.Errorf("Marshal(Document): %v", err)
	}
	if got.Hash != plan.Hash(got) {
		t.Errorf("hash %s is not the document's", got.Hash)
	}
}

// TestDocumentWithReserve: the sample (40 usable over 8 pods, a 40 ms
// queue wait, 220 ms latency) with a reserve of 8 at two permit server
// replicas: each pod holds 32 / 8 = 4, and its waiting room counts the 8
// reserve permits that can serve its waiters, floor((4 + 8) × 40 / 220) =
// 2, where its own 4 give floor(4 × 40 / 220) = 0. The replicas' shares
// are slices of the reserve, sized by their own permits as before.
func TestDocumentWithReserve(t *testing.T) {
	q := builders.DesignQuota().Deadline(300*time.Millisecond).Queue(40*time.Millisecond, 40*time.Millisecond).Obj()
	q.Spec.Demand = nil
	p, err := Size(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]int{"broker-a": 4, "broker-b": 4}
	for i := range 8 {
		pods[fmt.Sprintf("gw-%d", i)] = 4
	}
	lenders := map[string]bool{"broker-a": true, "broker-b": true}
	got := p.Document(q.Name, q.Spec.Downstream, q.Generation, Shares{Epoch: "e", Revision: 1, Pods: pods, Reserve: 8, Lenders: lenders})
	for name, s := range got.Pods {
		want := 2
		if lenders[name] {
			want = 0
		}
		if s.Permits != 4 || s.QueueCapacity != want || s.Workers != 4 {
			t.Errorf("%s: %d permits, waiting room %d, %d workers; want 4, %d, 4", name, s.Permits, s.QueueCapacity, s.Workers, want)
		}
	}
	if got.Permits != 0 || got.QueueCapacity != 0 {
		t.Errorf("base share: %d permits, waiting room %d; want none for a pod not named", got.Permits, got.QueueCapacity)
	}
	if err := plan.Validate(got); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// Without a reserve nothing changes: the rooms follow the own permits.
	without := p.Document(q.Name, q.Spec.Downstream, q.Generation, Shares{Epoch: "e", Revision: 1, Pods: map[string]int{"gw-0": 5}})
	if s := without.Pods["gw-0"]; s.QueueCapacity != 0 {
		t.Errorf("no reserve, 5 permits: waiting room %d, want floor(5 × 40 / 220) = 0", s.QueueCapacity)
	}
}
