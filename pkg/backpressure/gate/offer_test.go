package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// lendOut lends n permits of g out, keeping keep, and fails the test if
// one is refused.
func lendOut(t *testing.T, g *gate.Gate, keep, n int) []func() {
	t.Helper()
	var out []func()
	for i := range n {
		p, ok := g.LendOut(keep)
		if !ok {
			t.Fatalf("LendOut(%d) refused the permit %d of %d (stats %+v)", keep, i+1, n, g.Stats())
		}
		out = append(out, p.ReleaseFunc())
	}
	return out
}

// TestLendOutKeepsPermitsForTheGatesCalls: LendOut lends while more than
// keep permits are free, Spare says how many it could, and a permit lent
// out counts in InFlight and the lent-out stats but not in Admitted.
func TestLendOutKeepsPermitsForTheGatesCalls(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 4})
	for want := 3; want >= 1; want-- {
		if got := g.Spare(1); got != want {
			t.Fatalf("Spare(1) = %d, want %d", got, want)
		}
		lendOut(t, g, 1, 1)
	}
	if got := g.Spare(1); got != 0 {
		t.Errorf("Spare(1) with one permit free = %d, want 0", got)
	}
	if _, ok := g.LendOut(1); ok {
		t.Fatal("LendOut(1) lent the one permit it was to keep")
	}
	st := g.Stats()
	if st.InFlight != 3 || st.LentOut != 3 || st.LentOutInFlight != 3 || st.Admitted != 0 {
		t.Errorf("stats: in flight %d, lent out %d, lent out in flight %d, admitted %d; want 3, 3, 3, 0",
			st.InFlight, st.LentOut, st.LentOutInFlight, st.Admitted)
	}
	// The permit kept is the gate's own call's.
	own, err := g.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("the gate's call was refused the permit kept for it: %v", err)
	}
	if got := g.Spare(0); got != 0 {
		t.Errorf("Spare(0) with every permit taken = %d, want 0", got)
	}
	own.Release()
	// A negative keep keeps nothing.
	if got := g.Spare(-5); got != 1 {
		t.Errorf("Spare(-5) = %d, want 1", got)
	}
	last, ok := g.LendOut(-5)
	if !ok {
		t.Fatal("LendOut(-5) refused the last free permit")
	}
	release := last.ReleaseFunc()
	release()
	release() // only the first releases
	if st := g.Stats(); st.InFlight != 3 || st.LentOutInFlight != 3 || st.LentOut != 4 {
		t.Errorf("after one release of the fourth, released twice: in flight %d, lent out in flight %d, lent out %d; want 3, 3, 4",
			st.InFlight, st.LentOutInFlight, st.LentOut)
	}
}

// TestLendOutRefusesWhileACallWaits: with a call of the gate waiting, the
// gate lends nothing and says it has nothing spare; releasing a permit
// lent out admits that call, which is the gate's own admission.
func TestLendOutRefusesWhileACallWaits(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 2, QueueCapacity: 1, MaxQueueWait: time.Minute})
	lent := lendOut(t, g, 0, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := acquireAsync(ctx, g)
	eventually(t, "the call waits", func() bool { return g.Stats().Queued == 1 })
	if _, ok := g.LendOut(0); ok {
		t.Fatal("LendOut lent while a call waited")
	}
	if got := g.Spare(0); got != 0 {
		t.Errorf("Spare(0) while a call waits = %d, want 0", got)
	}
	lent[0]()
	select {
	case r := <-done:
		if r.err != nil || r.borrowed {
			t.Fatalf("the waiting call: %v (borrowed %v), want admitted on the released permit", r.err, r.borrowed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("releasing a permit lent out did not admit the waiting call within 5s")
	}
	lent[1]()
	if st := g.Stats(); st.InFlight != 0 || st.LentOutInFlight != 0 || st.Admitted != 1 || st.LentOut != 2 {
		t.Errorf("at the end: %+v; want nothing in flight, 1 admitted, 2 lent out", st)
	}
}

// TestLentOutPermitBlocksAShrink: a smaller limit waits for the permits
// lent out as for the gate's own calls.
func TestLentOutPermitBlocksAShrink(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 4})
	lent := lendOut(t, g, 0, 2)
	own, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(gate.Limits{Permits: 2}); err != nil {
		t.Fatal(err)
	}
	own.Release()
	// Two lent out, limit 2: the shrink has not drained.
	if got := g.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d with two permits lent out, want 2", got)
	}
	if _, err := g.TryAcquire(ctx); !errors.Is(err, gate.ErrQueueFull) {
		t.Fatalf("admitted with two permits lent out and a limit of 2 (err %v)", err)
	}
	if _, ok := g.LendOut(0); ok {
		t.Fatal("lent out a permit with none free under the smaller limit")
	}
	lent[0]()
	p, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("not admitted once a permit lent out came back: %v", err)
	}
	p.Release()
	lent[1]()
	if got := g.InFlight(); got != 0 {
		t.Errorf("InFlight = %d at the end, want 0", got)
	}
}

// TestReleaseOfALentOutPermitMovesALoan: under LendRules.ReturnEarly, a
// call running on a loan moves onto the permit lent out when it comes
// back, and its loan goes back; while the loan waits to move, nothing is
// lent out.
func TestReleaseOfALentOutPermitMovesALoan(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	l := newLender()
	if err := g.SetLenderRules(l, gate.LendRules{ReturnEarly: true}); err != nil {
		t.Fatal(err)
	}
	lent := lendOut(t, g, 0, 1)
	l.answers <- nil
	p, err := g.Acquire(withDeadline(t, time.Minute))
	if err != nil || !p.Borrowed() {
		t.Fatalf("with the one permit lent out: %v (borrowed %v), want a loan", err, p.Borrowed())
	}
	if !g.QueuedBit() {
		t.Fatal("the movable loan did not set the queued bit")
	}
	if got := g.Spare(0); got != 0 {
		t.Errorf("Spare(0) with a loan waiting to move = %d, want 0", got)
	}
	lent[0]()
	if l.back.Load() != 1 || g.InFlight() != 1 {
		t.Errorf("after the permit lent out came back: loans returned %d, in flight %d; want the loan back and its call on the permit",
			l.back.Load(), g.InFlight())
	}
	p.Release()
	if st := g.Stats(); st.InFlight != 0 || st.ReturnedEarly != 1 || st.LentOutInFlight != 0 {
		t.Errorf("at the end: %+v; want nothing in flight, one loan returned early", st)
	}
}

// TestLendOutOfAClosedGate: a closed gate lends nothing, and a permit it
// lent before closing is released as usual.
func TestLendOutOfAClosedGate(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 2})
	lent := lendOut(t, g, 0, 1)
	g.Close()
	if _, ok := g.LendOut(0); ok {
		t.Error("a closed gate lent a permit out")
	}
	if got := g.Spare(0); got != 0 {
		t.Errorf("Spare(0) of a closed gate = %d, want 0", got)
	}
	lent[0]()
	if got := g.InFlight(); got != 0 {
		t.Errorf("InFlight = %d after the release, want 0", got)
	}
}

// TestLendOutNeverBorrows: a gate with nothing free lends nothing out,
// and does not ask its Lender for a permit to lend.
func TestLendOutNeverBorrows(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	l := newLender()
	g.SetLender(l)
	defer holdAll(t, g)()
	if _, ok := g.LendOut(0); ok {
		t.Fatal("lent out a permit with none free")
	}
	select {
	case a := <-l.asks:
		t.Fatalf("LendOut asked the Lender (%+v)", a)
	default:
	}
}
