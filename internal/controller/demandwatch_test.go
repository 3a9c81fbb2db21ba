package controller

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// watchedGateway returns the watch of a gateway of four Ready pods whose
// 40 permits were divided on the demands 20, 10, 2 and 0, as a step leaves
// it, and checks that the division is the one worked out by hand in the
// envtest spec: 1 each, 29 over the demands above it, 7 evenly.
func watchedGateway(t *testing.T) *followWatch {
	t.Helper()
	names := []string{"gateway-00", "gateway-01", "gateway-02", "gateway-03"}
	w := &followWatch{namespace: "shop", selector: labels.Everything(), metric: "m", ready: names}
	values := map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}
	in := make([]division.Claimant, len(names))
	for i, n := range names {
		in[i] = division.Claimant{Key: n, Serving: true, Demand: values[n], Previous: 10}
	}
	out, moved := followDivision(40, in, false)
	if !slices.Equal(out, []int64{22, 12, 4, 2}) || !moved {
		t.Fatalf("the first division: %v (moved %v), want [22 12 4 2], moved", out, moved)
	}
	w.divided(40, in, names, out)
	w.state = w.stateOf(values, time.Time{}, nil)
	return w
}

// TestTheDemandWatchWakesOnlyWhatAStepWouldChange asks the watch of a
// divided gateway whether readings would change its next step.
func TestTheDemandWatchWakesOnlyWhatAStepWouldChange(t *testing.T) {
	w := watchedGateway(t)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	down := errors.New("the server is currently unable to handle the request")
	for _, tc := range []struct {
		name     string
		values   map[string]int64
		err      error
		dwelling bool
		want     bool
	}{
		{name: "the same demands", values: map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}},
		// Fresh targets 23, 12, 3, 2: none off by more than max(1, a
		// quarter of its target).
		{name: "a drift within the band", values: map[string]int64{"gateway-00": 21, "gateway-01": 11, "gateway-02": 2, "gateway-03": 0}},
		{name: "demands beyond the band", values: map[string]int64{"gateway-00": 30, "gateway-01": 30, "gateway-02": 2, "gateway-03": 0}, want: true},
		{name: "beyond the band while the last move dwells", values: map[string]int64{"gateway-00": 30, "gateway-01": 30, "gateway-02": 2, "gateway-03": 0}, dwelling: true},
		{name: "a pod no longer measured", values: map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2}, want: true},
		{name: "a failed read covered by the last reading", values: map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}, err: down, want: true},
		{name: "no reading at all", err: down, want: true},
	} {
		if got := w.moves(tc.values, at, tc.err, tc.dwelling); got != tc.want {
			t.Errorf("%s: moves %v, want %v", tc.name, got, tc.want)
		}
	}

	// Once the condition says the reading is stale, the next failed read
	// covered by the same reading changes nothing; equal shares once it
	// is no longer covered do.
	stale := map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}
	w.state = w.stateOf(stale, at, down)
	if w.moves(stale, at, down, false) {
		t.Error("a second failed read covered by the same reading: moves, want not")
	}
	if !w.moves(nil, time.Time{}, down, false) {
		t.Error("the reading no longer covers the failed read: does not move, want a move to equal shares")
	}
}

// TestTheDemandWatchReadsOnceAnIntervalAndWakesWhatMoved polls two
// watched quotas: one whose demand holds steady and one, sharing a
// contract, whose demand moves. Only the contract is woken, each quota is
// read once an interval, and a wake lost to a full queue is made again at
// the next interval.
func TestTheDemandWatchReadsOnceAnIntervalAndWakesWhatMoved(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	src := &demandSource{values: map[string]map[string]int64{}, errs: map[string]error{}, reads: map[string][]string{}}
	p := NewPublisher(nil, nil, nil, WithClock(clk), WithDemandSource(src))
	steady, moving := watchedGateway(t), watchedGateway(t)
	steady.wake = &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "steady"}}
	moving.namespace, moving.wake = "books", &v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: "logistics"}}
	p.demand.watched = map[types.NamespacedName]*followWatch{{Namespace: "shop", Name: "steady"}: steady, {Namespace: "books", Name: "moving"}: moving}
	src.set("shop", map[string]int64{"gateway-00": 20, "gateway-01": 10, "gateway-02": 2, "gateway-03": 0}, nil)
	src.set("books", map[string]int64{"gateway-00": 30, "gateway-01": 30, "gateway-02": 2, "gateway-03": 0}, nil)
	watch := demandWatch{p: p}
	ctx := context.Background()

	woken := func(ch chan event.GenericEvent) []string {
		var out []string
		for {
			select {
			case e := <-ch:
				out = append(out, e.Object.GetNamespace()+"/"+e.Object.GetName())
			default:
				return out
			}
		}
	}
	reads := func() (int, int) { return len(src.readsOf("shop")), len(src.readsOf("books")) }

	watch.poll(ctx)
	if q, c := woken(p.demand.wakeQuotas), woken(p.demand.wakeContracts); len(q) != 0 || !slices.Equal(c, []string{"/logistics"}) {
		t.Fatalf("first poll: quotas woken %v, contracts %v; want none and [/logistics]", q, c)
	}
	if s, b := reads(); s != 1 || b != 1 {
		t.Fatalf("first poll: %d and %d reads, want 1 each", s, b)
	}

	// Within the interval nothing is read again, whatever polls.
	clk.Step(DefaultDemandInterval - time.Second)
	watch.poll(ctx)
	if s, b := reads(); s != 1 || b != 1 {
		t.Fatalf("within the interval: %d and %d reads, want 1 each", s, b)
	}

	// The contract's reconciler is not there to take the wake: it is
	// lost, and made again an interval later.
	p.demand.wakeContracts = make(chan event.GenericEvent)
	clk.Step(time.Second)
	watch.poll(ctx)
	if s, b := reads(); s != 2 || b != 2 {
		t.Fatalf("an interval on: %d and %d reads, want 2 each", s, b)
	}
	p.demand.wakeContracts = make(chan event.GenericEvent, 1)
	clk.Step(DefaultDemandInterval)
	watch.poll(ctx)
	if c := woken(p.demand.wakeContracts); !slices.Equal(c, []string{"/logistics"}) {
		t.Fatalf("the interval after a lost wake: contracts woken %v, want [/logistics]", c)
	}
	if q := woken(p.demand.wakeQuotas); len(q) != 0 {
		t.Fatalf("the steady quota was woken: %v", q)
	}

	// A quota no longer watched is not read.
	p.demand.unwatch(types.NamespacedName{Namespace: "books", Name: "moving"})
	clk.Step(DefaultDemandInterval)
	watch.poll(ctx)
	if s, b := reads(); s != 4 || b != 3 {
		t.Fatalf("after the unwatch: %d and %d reads, want 4 and 3", s, b)
	}
}

// TestTheDemandWatchLetsGoOfAContractsQuotas unwatches what a deleted
// contract woke, and nothing else.
func TestTheDemandWatchLetsGoOfAContractsQuotas(t *testing.T) {
	var r demandReads
	keys := []types.NamespacedName{{Namespace: "books", Name: "a"}, {Namespace: "shop", Name: "b"}, {Namespace: "shop", Name: "c"}}
	wakes := []client.Object{
		&v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: "logistics"}},
		&v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: "payments"}},
		// A quota of the same name as the contract is not its caller.
		&v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "logistics"}},
	}
	r.watched = map[types.NamespacedName]*followWatch{}
	for i, k := range keys {
		r.watched[k] = &followWatch{wake: wakes[i]}
	}
	r.unwatchWokenBy("logistics")
	var left []string
	for k := range r.watched {
		left = append(left, k.String())
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"shop/b", "shop/c"}) {
		t.Fatalf("watched after the contract logistics went: %v, want [shop/b shop/c]", left)
	}
}
