package gate

import "testing"

// TestLendOutRefusesWhileTheRoomOrALoanWaits puts a waiter, then a loan
// waiting to move, beside free permits, a state a release passes through
// before it hands its permit on (the queued bit is set and dispatchLocked
// has still to run): LendOut lends nothing and Spare is 0, so the permit
// goes to the gate's call. Neither check can be told from "no permit
// free" through the exported API, where the two never last together.
func TestLendOutRefusesWhileTheRoomOrALoanWaits(t *testing.T) {
	for _, what := range []string{"waiter", "loan"} {
		t.Run(what, func(t *testing.T) {
			g, err := New("offer", Limits{Permits: 4})
			if err != nil {
				t.Fatal(err)
			}
			g.mu.Lock()
			var undo func()
			switch what {
			case "waiter":
				w := g.newWaiterLocked()
				g.room.PushBack(w)
				undo = func() { g.room.Remove(w); g.recycleLocked(w) }
			case "loan":
				e := g.loans.New()
				g.loans.PushBack(e)
				undo = func() { g.loans.Remove(e); g.loans.Recycle(e) }
			}
			g.setQueuedLocked()
			g.mu.Unlock()

			if got := g.Spare(0); got != 0 {
				t.Errorf("Spare(0) with a %s waiting and 4 permits free = %d, want 0", what, got)
			}
			if _, ok := g.LendOut(0); ok {
				t.Errorf("LendOut lent with a %s waiting", what)
			}

			g.mu.Lock()
			undo()
			g.clearQueuedIfIdleLocked()
			g.mu.Unlock()
			if got := g.Spare(0); got != 4 {
				t.Errorf("Spare(0) once nothing waits = %d, want 4", got)
			}
			p, ok := g.LendOut(0)
			if !ok {
				t.Fatal("LendOut refused once nothing waits")
			}
			p.Release()
		})
	}
}
