package gate

import (
	"context"
	"testing"
)

// TestFoldDuringPhantom replays, step by step, the interleaving that once
// corrupted the state word: a lost fast-path race adds a phantom admission
// (see state.go), the slow path folds the admission field into
// admittedLocked before the phantom is undone, and then the undo subtracts
// from the folded field. The undo must never borrow from the flags above the
// field, and the admission count must stay exact.
func TestFoldDuringPhantom(t *testing.T) {
	ctx := context.Background()
	g, err := New("fold", Limits{Permits: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Bring the field to just below the fold, as after countFold-1 admissions.
	for range countFold - 1 {
		p, err := g.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}

	first, err := g.TryAcquire(ctx) // the last fast-path admission before the fold
	if err != nil {
		t.Fatal(err)
	}
	// A racer that saw room before first was admitted adds its admission and
	// finds the field full: a phantom, to be undone.
	if old := g.add(admitOne) - admitOne; fastAdmissible(old) {
		t.Fatalf("the racer's admission should have failed: %064b", old)
	}
	second, err := g.TryAcquire(ctx) // the slow path admits and folds
	if err != nil {
		t.Fatal(err)
	}
	g.undoAdmit() // the racer takes its phantom back

	s := g.load()
	if s&(latencyBit|ratedBit|closedBit|queuedBit) != 0 || inflight(s) != 2 {
		t.Fatalf("state %064b: flags %04b, in flight %d; want no flags, 2 in flight", s, s>>60, inflight(s))
	}
	first.Release()
	second.Release()
	if got, want := g.Stats().Admitted, uint64(countFold+1); got != want {
		t.Errorf("Admitted = %d, want %d", got, want)
	}
	if _, err := g.TryAcquire(ctx); err != nil {
		t.Errorf("the gate no longer admits: %v", err)
	}
}
