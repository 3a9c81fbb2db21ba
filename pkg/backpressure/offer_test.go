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

// offers records what Options.Offer was given, and the stops called.
type offers struct {
	mu       sync.Mutex
	offerers map[string]gate.Offerer
	spare    map[string]int // Spare as Offer read it, at once
	stopped  map[string]int
}

func newOffers() *offers {
	return &offers{offerers: map[string]gate.Offerer{}, spare: map[string]int{}, stopped: map[string]int{}}
}

// offer is an Options.Offer. It reads the Offerer's Spare at once, as a
// stream client telling the permit server in its first message does.
func (o *offers) offer(name string, of gate.Offerer) func() {
	spare := of.Spare()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.offerers[name], o.spare[name] = of, spare
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.stopped[name]++
	}
}

func (o *offers) get(t *testing.T, name string) gate.Offerer {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	of, ok := o.offerers[name]
	if !ok {
		t.Fatalf("Options.Offer was not called for gate %s", name)
	}
	return of
}

func (o *offers) stops(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stopped[name]
}

// TestOptionsOfferKeepMustNotBeNegative: New names the field.
func TestOptionsOfferKeepMustNotBeNegative(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	_, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{OfferKeep: -1})
	if err == nil || !strings.Contains(err.Error(), "Options.OfferKeep") {
		t.Errorf("New with OfferKeep -1: %v, want an error naming Options.OfferKeep", err)
	}
}

// TestOptionsOffer: every gate the Runtime makes is offered, with an
// Offerer that lends its permits beyond OfferKeep; a permit lent out is
// exported, counts in the gate's in flight (the drain at Start's end waits
// for it), and the offers stop when the Runtime stops.
func TestOptionsOffer(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 3))
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 1))
	reg := prometheus.NewPedanticRegistry()
	o := newOffers()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Registerer: reg, Offer: o.offer, OfferKeep: 1, DrainTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		// Start's error is checked below, where the test stops it; this
		// wait is for a test that fails before.
		if err := <-done; err != nil {
			t.Logf("Start: %v", err)
		}
	})
	g := sharetest.MustGate(t, rt, "logistics-api")
	of := o.get(t, "logistics-api")
	if o.spare["logistics-api"] != 2 || o.spare["payments"] != 0 {
		t.Errorf("Spare as Offer read it: %v, want logistics-api 2 (3 less 1 kept), payments 0", o.spare)
	}
	first, ok := of.Lend(time.Second)
	if !ok {
		t.Fatal("the Offerer refused to lend a free permit")
	}
	second, ok := of.Lend(time.Second)
	if !ok {
		t.Fatal("the Offerer refused to lend the second permit beyond the one kept")
	}
	if _, ok := of.Lend(time.Second); ok {
		t.Error("the Offerer lent the permit OfferKeep keeps")
	}
	if got := of.Spare(); got != 0 {
		t.Errorf("Spare with only the kept permit free = %d, want 0", got)
	}
	if g.InFlight() != 2 {
		t.Errorf("in flight %d with two permits lent out, want 2", g.InFlight())
	}
	first()
	first() // only the first call releases
	want := `
# HELP backpressure_gate_lent_out_in_flight Permits of the gate lent out to calls of other pods and not yet released. They are in backpressure_gate_in_flight, which a smaller share waits for, but are not this pod's demand.
# TYPE backpressure_gate_lent_out_in_flight gauge
backpressure_gate_lent_out_in_flight{gate="logistics-api"} 1
backpressure_gate_lent_out_in_flight{gate="payments"} 0
# HELP backpressure_gate_lent_out_total Permits of the gate's own share lent out to calls of other pods whose shares were full while the reserve was lent out (the permit server asked for them); not counted in backpressure_gate_admitted_total.
# TYPE backpressure_gate_lent_out_total counter
backpressure_gate_lent_out_total{gate="logistics-api"} 2
backpressure_gate_lent_out_total{gate="payments"} 0
# HELP backpressure_gate_in_flight Calls admitted by the gate and not yet released.
# TYPE backpressure_gate_in_flight gauge
backpressure_gate_in_flight{gate="logistics-api"} 1
backpressure_gate_in_flight{gate="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"backpressure_gate_lent_out_total", "backpressure_gate_lent_out_in_flight", "backpressure_gate_in_flight"); err != nil {
		t.Error(err)
	}

	// Stop with a permit still lent out: the offers stop, and the drain
	// waits for the permit as for a call, past its timeout here.
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "logistics-api") {
			t.Errorf("Start with a permit lent out past the drain timeout: %v, want an error naming logistics-api", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10s of its context's end")
	}
	done <- nil // for the cleanup's wait
	if o.stops("logistics-api") != 1 || o.stops("payments") != 1 {
		t.Errorf("stops called %v, want once for each gate", o.stopped)
	}
	second()
	if g.InFlight() != 0 {
		t.Errorf("in flight %d once the permit came back, want 0", g.InFlight())
	}
	if _, ok := of.Lend(time.Second); ok {
		t.Error("the Offerer lent once the Runtime had stopped")
	}
	if got := of.Spare(); got != 0 {
		t.Errorf("Spare once the Runtime had stopped = %d, want 0", got)
	}
}

// TestOfferShutdownStops: Shutdown, for a Runtime never started, stops the
// offers too.
func TestOfferShutdownStops(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	o := newOffers()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{Offer: o.offer})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o.stops("logistics-api") != 1 {
		t.Errorf("stop called %d times, want once", o.stops("logistics-api"))
	}
	if _, ok := o.get(t, "logistics-api").Lend(time.Second); ok {
		t.Error("the Offerer lent after Shutdown")
	}
}

// TestOfferRefusesWhatTheLapseCouldOutlive: the Offerer lends a permit
// only for a lease that ends before the calls in flight at a lapse would:
// while the source is live, up to the delay less the margin; as an
// unconfirmed source nears its lapse, less; and nothing once the gate
// has lapsed, until the source confirms its plan again.
func TestOfferRefusesWhatTheLapseCouldOutlive(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, lapsingDoc(4)) // a delay of 60 s, a deadline of 2 s
	o := newOffers()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Offer: o.offer, SourceLapseMargin: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	of := o.get(t, "logistics-api")
	lend := func(ttl time.Duration) bool {
		t.Helper()
		release, ok := of.Lend(ttl)
		if ok {
			release()
		}
		return ok
	}
	// Live: the lapse limit is 60 s less the margin and the deadline, 57 s,
	// and the calls in flight then end within 59 s.
	if !lend(59 * time.Second) {
		t.Error("refused a lease of 59 s with the source live")
	}
	if lend(59*time.Second + time.Millisecond) {
		t.Error("lent for a lease longer than the delay less the margin")
	}
	// Unconfirmed for 30 s: a lapse may come 27 s from now, and its calls
	// in flight end 2 s later.
	now := time.Now()
	rt.CheckLapses(now, false, now.Add(-30*time.Second))
	if !lend(28 * time.Second) {
		t.Error("refused a lease of 28 s, 29 s before the calls of a lapse would end")
	}
	if lend(29*time.Second + 100*time.Millisecond) {
		t.Error("lent for a lease that would outlive the calls in flight at the lapse")
	}
	if of.Spare() != 4 {
		t.Errorf("Spare before the lapse = %d, want 4", of.Spare())
	}
	// Lapsed.
	rt.CheckLapses(now, false, now.Add(-time.Minute))
	if lend(time.Millisecond) || of.Spare() != 0 {
		t.Errorf("a lapsed gate lent, or said it had %d spare", of.Spare())
	}
	now = time.Now()
	rt.CheckLapses(now, true, now)
	if !lend(time.Second) || of.Spare() != 4 {
		t.Errorf("refused once the source confirmed the plan again (spare %d)", of.Spare())
	}
	if lend(0) {
		t.Error("lent for a lease of 0")
	}
}

// TestOfferWithoutADelayLendsForAnyLease: a plan without the operator's
// delay never lapses, and the permits lent out count in the gate's calls
// in flight, which a shrink waits for: no lease is too long.
func TestOfferWithoutADelayLendsForAnyLease(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 2))
	o := newOffers()
	if _, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{Offer: o.offer}); err != nil {
		t.Fatal(err)
	}
	release, ok := o.get(t, "logistics-api").Lend(time.Hour)
	if !ok {
		t.Fatal("refused a lease of an hour on a plan that never lapses")
	}
	release()
}

// TestOfferRefusesABootstrapShare: the pod's own conservative share is
// not the operator's to lend from; once the published plan replaces it,
// the same Offerer lends.
func TestOfferRefusesABootstrapShare(t *testing.T) {
	dir := t.TempDir()
	o := newOffers()
	events := sharetest.NewRecorder()
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Bootstrap: []backpressure.Share{sharetest.BootShare("payments", 2)}, BootstrapWait: time.Millisecond,
		Offer: o.offer, OnApplied: events.Hook,
	})
	if err != nil {
		t.Fatal(err)
	}
	events.Next(t)
	of := o.get(t, "payments")
	if _, ok := of.Lend(time.Second); ok {
		t.Error("lent a permit of the bootstrap share")
	}
	if got := of.Spare(); got != 0 {
		t.Errorf("Spare on the bootstrap share = %d, want 0", got)
	}
	sharetest.Start(t, rt)
	sharetest.WritePlan(t, dir, sharetest.Doc("payments", 2))
	events.Next(t)
	release, ok := of.Lend(time.Second)
	if !ok {
		t.Fatal("refused to lend once the published plan was in force")
	}
	release()
	if got := of.Spare(); got != 2 {
		t.Errorf("Spare on the published plan = %d, want 2", got)
	}
}
