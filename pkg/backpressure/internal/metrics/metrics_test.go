package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/histogram"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/metrics"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// fakeGate reports fixed Stats, so the exposition can be compared exactly.
type fakeGate struct {
	name  string
	stats gate.Stats
}

func (f fakeGate) Name() string      { return f.name }
func (f fakeGate) Stats() gate.Stats { return f.stats }

type fakeDispatcher struct {
	name  string
	stats dispatch.Stats
}

func (f fakeDispatcher) Name() string          { return f.name }
func (f fakeDispatcher) Stats() dispatch.Stats { return f.stats }

func waits(ds ...time.Duration) queuewait.Snapshot {
	var h histogram.Histogram
	for _, d := range ds {
		h.Observe(d)
	}
	return h.Snapshot()
}

const gateWant = `
# HELP backpressure_gate_admitted_total Calls the gate admitted.
# TYPE backpressure_gate_admitted_total counter
backpressure_gate_admitted_total{gate="logistics"} 42
backpressure_gate_admitted_total{gate="payments"} 0
# HELP backpressure_gate_borrows_total Permits the gate asked of the reserve's permit server when its own were taken, by result: borrowed (the call ran on a lent permit, not counted in admitted), not_lent (none to lend), failed (the server could not be asked in time; the call went on with the pod's own share).
# TYPE backpressure_gate_borrows_total counter
backpressure_gate_borrows_total{gate="logistics",result="borrowed"} 4
backpressure_gate_borrows_total{gate="logistics",result="failed"} 1
backpressure_gate_borrows_total{gate="logistics",result="not_lent"} 6
backpressure_gate_borrows_total{gate="payments",result="borrowed"} 0
backpressure_gate_borrows_total{gate="payments",result="failed"} 0
backpressure_gate_borrows_total{gate="payments",result="not_lent"} 0
# HELP backpressure_gate_borrowed_in_flight Calls of the gate running on permits borrowed from the reserve, not in backpressure_gate_in_flight (a call whose loan was returned early counts there).
# TYPE backpressure_gate_borrowed_in_flight gauge
backpressure_gate_borrowed_in_flight{gate="logistics"} 1
backpressure_gate_borrowed_in_flight{gate="payments"} 0
# HELP backpressure_gate_in_flight Calls admitted by the gate and not yet released.
# TYPE backpressure_gate_in_flight gauge
backpressure_gate_in_flight{gate="logistics"} 3
backpressure_gate_in_flight{gate="payments"} 0
# HELP backpressure_gate_lent_out_in_flight Permits of the gate lent out to calls of other pods and not yet released. They are in backpressure_gate_in_flight, which a smaller share waits for, but are not this pod's demand.
# TYPE backpressure_gate_lent_out_in_flight gauge
backpressure_gate_lent_out_in_flight{gate="logistics"} 2
backpressure_gate_lent_out_in_flight{gate="payments"} 0
# HELP backpressure_gate_lent_out_total Permits of the gate's own share lent out to calls of other pods whose shares were full while the reserve was lent out (the permit server asked for them); not counted in backpressure_gate_admitted_total.
# TYPE backpressure_gate_lent_out_total counter
backpressure_gate_lent_out_total{gate="logistics"} 7
backpressure_gate_lent_out_total{gate="payments"} 0
# HELP backpressure_gate_loans_returned_early_total Borrowed permits returned to the reserve before their calls ended, the calls going on on permits of the gate's own (returning early: gate.LendRules.ReturnEarly).
# TYPE backpressure_gate_loans_returned_early_total counter
backpressure_gate_loans_returned_early_total{gate="logistics"} 2
backpressure_gate_loans_returned_early_total{gate="payments"} 0
# HELP backpressure_gate_permits Permits (in-flight limit) of the gate in force.
# TYPE backpressure_gate_permits gauge
backpressure_gate_permits{gate="logistics"} 5
backpressure_gate_permits{gate="payments"} 1
# HELP backpressure_gate_queue_depth Calls waiting in the gate's waiting room.
# TYPE backpressure_gate_queue_depth gauge
backpressure_gate_queue_depth{gate="logistics"} 2
backpressure_gate_queue_depth{gate="payments"} 0
# HELP backpressure_gate_queue_wait_seconds Time calls that waited spent in the gate's waiting room, whether admitted or not.
# TYPE backpressure_gate_queue_wait_seconds histogram
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.0005"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.001"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.0025"} 1
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.005"} 1
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.01"} 1
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.025"} 1
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.05"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.1"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.25"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="0.5"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="1"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="2.5"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="5"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="10"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="logistics",le="+Inf"} 2
backpressure_gate_queue_wait_seconds_sum{gate="logistics"} 0.042
backpressure_gate_queue_wait_seconds_count{gate="logistics"} 2
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.0005"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.001"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.0025"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.005"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.01"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.025"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.05"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.1"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.25"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="0.5"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="1"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="2.5"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="5"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="10"} 0
backpressure_gate_queue_wait_seconds_bucket{gate="payments",le="+Inf"} 0
backpressure_gate_queue_wait_seconds_sum{gate="payments"} 0
backpressure_gate_queue_wait_seconds_count{gate="payments"} 0
# HELP backpressure_gate_rejected_total Calls the gate rejected, by reason.
# TYPE backpressure_gate_rejected_total counter
backpressure_gate_rejected_total{gate="logistics",reason="closed"} 0
backpressure_gate_rejected_total{gate="logistics",reason="deadline_too_short"} 1
backpressure_gate_rejected_total{gate="logistics",reason="queue_full"} 7
backpressure_gate_rejected_total{gate="logistics",reason="rate_limited"} 0
backpressure_gate_rejected_total{gate="logistics",reason="wait_timeout"} 2
backpressure_gate_rejected_total{gate="payments",reason="closed"} 0
backpressure_gate_rejected_total{gate="payments",reason="deadline_too_short"} 0
backpressure_gate_rejected_total{gate="payments",reason="queue_full"} 0
backpressure_gate_rejected_total{gate="payments",reason="rate_limited"} 0
backpressure_gate_rejected_total{gate="payments",reason="wait_timeout"} 0
`

func TestGateCollectorExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.NewGateCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	logistics := fakeGate{name: "logistics", stats: gate.Stats{
		Limits:    gate.Limits{Permits: 5},
		InFlight:  3,
		Queued:    2,
		Admitted:  42,
		Rejected:  map[gate.Reason]uint64{gate.DeadlineTooShort: 1, gate.QueueFull: 7, gate.WaitTimeout: 2},
		QueueWait: waits(2*time.Millisecond, 40*time.Millisecond),
		Borrowed:  4, NotLent: 6, LendFailed: 1, ReturnedEarly: 2, BorrowedInFlight: 1, LentOut: 7, LentOutInFlight: 2,
	}}
	// One registry serves many gates.
	payments := fakeGate{name: "payments", stats: gate.Stats{Limits: gate.Limits{Permits: 1}}}
	for _, g := range []fakeGate{payments, logistics} {
		if err := c.Add(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gateWant)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	if err := c.Add(fakeGate{name: "logistics"}); err == nil {
		t.Error("adding a second gate named logistics succeeded")
	}
	c.Remove("payments")
	if n, err := testutil.GatherAndCount(reg, "backpressure_gate_in_flight"); err != nil || n != 1 {
		t.Errorf("after Remove: %d in-flight series (err %v), want 1", n, err)
	}
}

// TestGateCollectorReadsLiveCounters checks that a scrape sees a real gate's
// state as it is at scrape time.
func TestGateCollectorReadsLiveCounters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.NewGateCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.New("logistics", gate.Limits{Permits: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(g); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p1, _ := g.Acquire(ctx)
	p2, _ := g.Acquire(ctx)
	if _, err := g.TryAcquire(ctx); err == nil {
		t.Fatal("third permit granted")
	}
	const want = `
# HELP backpressure_gate_admitted_total Calls the gate admitted.
# TYPE backpressure_gate_admitted_total counter
backpressure_gate_admitted_total{gate="logistics"} 2
# HELP backpressure_gate_borrowed_in_flight Calls of the gate running on permits borrowed from the reserve, not in backpressure_gate_in_flight (a call whose loan was returned early counts there).
# TYPE backpressure_gate_borrowed_in_flight gauge
backpressure_gate_borrowed_in_flight{gate="logistics"} 1
backpressure_gate_borrowed_in_flight{gate="payments"} 0
# HELP backpressure_gate_in_flight Calls admitted by the gate and not yet released.
# TYPE backpressure_gate_in_flight gauge
backpressure_gate_in_flight{gate="logistics"} %d
# HELP backpressure_gate_permits Permits (in-flight limit) of the gate in force.
# TYPE backpressure_gate_permits gauge
backpressure_gate_permits{gate="logistics"} %d
`
	names := []string{"backpressure_gate_admitted_total", "backpressure_gate_in_flight", "backpressure_gate_permits"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(want, 2, 2)), names...); err != nil {
		t.Error(err)
	}
	p1.Release()
	p2.Release()
	if err := g.Update(gate.Limits{Permits: 7}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(want, 0, 7)), names...); err != nil {
		t.Error(err)
	}
	const rejected = `
# HELP backpressure_gate_rejected_total Calls the gate rejected, by reason.
# TYPE backpressure_gate_rejected_total counter
backpressure_gate_rejected_total{gate="logistics",reason="closed"} 0
backpressure_gate_rejected_total{gate="logistics",reason="deadline_too_short"} 0
backpressure_gate_rejected_total{gate="logistics",reason="queue_full"} 1
backpressure_gate_rejected_total{gate="logistics",reason="rate_limited"} 0
backpressure_gate_rejected_total{gate="logistics",reason="wait_timeout"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(rejected), "backpressure_gate_rejected_total"); err != nil {
		t.Error(err)
	}
}

func TestDispatcherCollectorExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.NewDispatcherCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Add(fakeDispatcher{name: "fanout", stats: dispatch.Stats{
		Limits:    dispatch.Limits{Workers: 5, QueueCapacity: 9},
		Running:   5,
		Active:    4,
		Queued:    3,
		Rejected:  map[dispatch.Reason]uint64{dispatch.QueueFull: 11, dispatch.ContextDone: 2},
		QueueWait: waits(300 * time.Microsecond),
	}}); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP backpressure_dispatcher_active_workers Workers of the dispatcher that are not idle.
# TYPE backpressure_dispatcher_active_workers gauge
backpressure_dispatcher_active_workers{dispatcher="fanout"} 4
# HELP backpressure_dispatcher_queue_depth Tasks waiting for a worker.
# TYPE backpressure_dispatcher_queue_depth gauge
backpressure_dispatcher_queue_depth{dispatcher="fanout"} 3
# HELP backpressure_dispatcher_rejected_total Tasks the dispatcher refused or dropped, by reason.
# TYPE backpressure_dispatcher_rejected_total counter
backpressure_dispatcher_rejected_total{dispatcher="fanout",reason="closed"} 0
backpressure_dispatcher_rejected_total{dispatcher="fanout",reason="context_done"} 2
backpressure_dispatcher_rejected_total{dispatcher="fanout",reason="queue_full"} 11
backpressure_dispatcher_rejected_total{dispatcher="fanout",reason="shutdown"} 0
# HELP backpressure_dispatcher_workers Workers the dispatcher is configured with.
# TYPE backpressure_dispatcher_workers gauge
backpressure_dispatcher_workers{dispatcher="fanout"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"backpressure_dispatcher_active_workers", "backpressure_dispatcher_queue_depth",
		"backpressure_dispatcher_rejected_total", "backpressure_dispatcher_workers"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "backpressure_dispatcher_queue_wait_seconds"); err != nil || n != 1 {
		t.Errorf("queue wait histograms = %d (err %v), want 1", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	// A real dispatcher satisfies the source interface.
	d, err := dispatch.New("real", dispatch.Limits{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Shutdown(context.Background()) }()
	if err := c.Add(d); err != nil {
		t.Fatal(err)
	}
	const workers = `
# HELP backpressure_dispatcher_workers Workers the dispatcher is configured with.
# TYPE backpressure_dispatcher_workers gauge
backpressure_dispatcher_workers{dispatcher="fanout"} 5
backpressure_dispatcher_workers{dispatcher="real"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(workers), "backpressure_dispatcher_workers"); err != nil {
		t.Error(err)
	}
}

func TestRetryCollectorExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := metrics.NewRetryCollector(reg)
	if err != nil {
		t.Fatal(err)
	}
	b := retry.NewBudget("logistics", 1e-9, 1)
	if err := c.Add(b); err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context) error { return context.DeadlineExceeded }
	p := retry.Policy{MaxRetries: 3, Retryable: func(error) bool { return true }, Budget: b, Rand: func() float64 { return 0 }}
	_ = retry.Do(context.Background(), p, fail) // one retry, then the budget is empty
	const want = `
# HELP backpressure_retry_attempts_total Retries made with the gate's retry budget.
# TYPE backpressure_retry_attempts_total counter
backpressure_retry_attempts_total{gate="logistics"} 1
# HELP backpressure_retry_budget_exhausted_total Retries refused because the gate's retry budget had no token.
# TYPE backpressure_retry_budget_exhausted_total counter
backpressure_retry_budget_exhausted_total{gate="logistics"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestRegisterer(t *testing.T) {
	// nil: not registered anywhere, the global registry included.
	c, err := metrics.NewGateCollector(nil)
	if err != nil {
		t.Fatal(err)
	}
	if prometheus.DefaultRegisterer.Unregister(c) {
		t.Error("a collector made with a nil Registerer was in the global registry")
	}
	// The caller may register it later, once.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	// A second collector of the same kind on the same registry is refused:
	// one collector serves every gate.
	if _, err := metrics.NewGateCollector(reg); err == nil {
		t.Error("registering a second gate collector succeeded")
	}
	for _, newCollector := range []func(prometheus.Registerer) error{
		func(r prometheus.Registerer) error { _, err := metrics.NewDispatcherCollector(r); return err },
		func(r prometheus.Registerer) error { _, err := metrics.NewRetryCollector(r); return err },
	} {
		if err := newCollector(reg); err != nil {
			t.Errorf("other collectors share the registry: %v", err)
		}
	}
}
