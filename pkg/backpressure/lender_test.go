package backpressure_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// countingLender lends every time and remembers for which gates it was
// made and how many loans came back.
type countingLender struct {
	mu       sync.Mutex
	made     []string
	returned int
}

func (c *countingLender) lenderFor(gateName string) gate.Lender {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.made = append(c.made, gateName)
	return c
}

func (c *countingLender) Lend(context.Context, time.Duration, time.Duration) (gate.Loan, error) {
	return c, nil
}

func (c *countingLender) Return() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.returned++
}

// borrowBeyondShare starts a Runtime whose gate logistics-api has a share
// of 1 and borrows from a countingLender by rules, and takes the share's
// permit and a lent one.
func borrowBeyondShare(t *testing.T, rules gate.LendRules) (g *gate.Gate, lender *countingLender, reg *prometheus.Registry, own, lent *gate.Permit) {
	t.Helper()
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 1))
	lender = &countingLender{}
	reg = prometheus.NewPedanticRegistry()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"logistics-api"}, Lender: lender.lenderFor, Registerer: reg, LendRules: rules,
	})
	if err != nil {
		t.Fatal(err)
	}
	g = sharetest.MustGate(t, rt, "logistics-api")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	own, lent = new(gate.Permit), new(gate.Permit)
	if *own, err = g.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if *lent, err = g.Acquire(ctx); err != nil || !lent.Borrowed() {
		t.Fatalf("beyond the share of 1: %v (borrowed %v), want a lent permit", err, lent.Borrowed())
	}
	return g, lender, reg, own, lent
}

// TestOptionsLender: every gate the Runtime makes gets its Lender, and
// borrows from it when its share is full; the borrows are exported.
func TestOptionsLender(t *testing.T) {
	_, lender, reg, own, lent := borrowBeyondShare(t, gate.LendRules{})
	lent.Release()
	own.Release()
	lender.mu.Lock()
	made, returned := lender.made, lender.returned
	lender.mu.Unlock()
	if len(made) != 1 || made[0] != "logistics-api" || returned != 1 {
		t.Errorf("lenders made for %v, loans returned %d: want one for logistics-api, one returned", made, returned)
	}
	want := `
# HELP backpressure_gate_borrows_total Permits the gate asked of the reserve's permit server when its own were taken, by result: borrowed (the call ran on a lent permit, not counted in admitted), not_lent (none to lend), failed (the server could not be asked in time; the call went on with the pod's own share).
# TYPE backpressure_gate_borrows_total counter
backpressure_gate_borrows_total{gate="logistics-api",result="borrowed"} 1
backpressure_gate_borrows_total{gate="logistics-api",result="failed"} 0
backpressure_gate_borrows_total{gate="logistics-api",result="not_lent"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_gate_borrows_total"); err != nil {
		t.Error(err)
	}
}

// TestOptionsLendRules: the Runtime's gates borrow by Options.LendRules (a
// loan goes back as soon as the share has a permit free, and that is
// exported), and a rule that is invalid fails New with its field named.
func TestOptionsLendRules(t *testing.T) {
	g, lender, reg, own, lent := borrowBeyondShare(t, gate.LendRules{ReturnEarly: true})
	own.Release()
	lender.mu.Lock()
	returned := lender.returned
	lender.mu.Unlock()
	if returned != 1 || g.InFlight() != 1 {
		t.Errorf("after the share's call ended: loans returned %d, in flight %d; want the loan back and its call on the share", returned, g.InFlight())
	}
	lent.Release()
	want := `
# HELP backpressure_gate_loans_returned_early_total Borrowed permits returned to the reserve before their calls ended, the calls going on on permits of the gate's own (returning early: gate.LendRules.ReturnEarly).
# TYPE backpressure_gate_loans_returned_early_total counter
backpressure_gate_loans_returned_early_total{gate="logistics-api"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "backpressure_gate_loans_returned_early_total"); err != nil {
		t.Error(err)
	}

	_, err := backpressure.New(t.Context(), backpressure.FromDir(t.TempDir()), backpressure.Options{
		Gates: []string{"logistics-api"}, LendRules: gate.LendRules{AskAfter: -time.Second},
	})
	if err == nil || !strings.Contains(err.Error(), "Options.LendRules") || !strings.Contains(err.Error(), "AskAfter") {
		t.Errorf("New with a negative AskAfter: %v, want an error naming Options.LendRules and AskAfter", err)
	}
}
