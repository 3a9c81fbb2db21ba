package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, Margin: margin, OfferAskTimeout: 10 * time.Second, Clock: clock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 1)
	_, _ = borrow(b, "pod-a") // learning
	clock.SetTime(b.LearningUntil())
	l := mustBorrow(t, b, "pod-a")
	_, _ = borrow(b, "pod-b") // exhausted
	b.Return("g", l.Incarnation, l.ID)
	mustBorrow(t, b, "pod-b")
	// The reserve is lent out: pod-c's offer serves pod-b, and pod-d,
	// with no spare, is not asked.
	lender, dry := offer(t, b, "pod-c", 1), offer(t, b, "pod-d", 0)
	done := borrowAsync(context.Background(), b, "pod-b", 0, 0)
	lender.Answer(wantAsk(t, "pod-c", next(t, lender)), true, 0)
	if r := result(t, "the borrow", done); r.err != nil {
		t.Fatal(r.err)
	}
	nothingFor(t, dry)
	_, _ = b.Borrow(context.Background(), broker.Request{Gate: "x", Pod: "p", Hold: time.Second})

	want := `
# HELP backpressure_broker_borrows_total Borrows by pod and result (granted or refused): the demand beyond each pod's own share. A pod's series goes away after it stops borrowing.
# TYPE backpressure_broker_borrows_total counter
backpressure_broker_borrows_total{gate="g",pod="pod-a",result="granted"} 1
backpressure_broker_borrows_total{gate="g",pod="pod-a",result="refused"} 1
backpressure_broker_borrows_total{gate="g",pod="pod-b",result="granted"} 2
backpressure_broker_borrows_total{gate="g",pod="pod-b",result="refused"} 1
# HELP backpressure_broker_capacity Permits of the gate's reserve this server may lend: the capacity in force.
# TYPE backpressure_broker_capacity gauge
backpressure_broker_capacity{gate="g"} 1
# HELP backpressure_broker_leases Leases outstanding; above the capacity only after it shrank, until enough have ended.
# TYPE backpressure_broker_leases gauge
backpressure_broker_leases{gate="g"} 1
# HELP backpressure_broker_leases_ended_total Leases ended, of the reserve and offered together, by how: returned by the borrower, or expired at the end of their time.
# TYPE backpressure_broker_leases_ended_total counter
backpressure_broker_leases_ended_total{gate="g",how="expired"} 0
backpressure_broker_leases_ended_total{gate="g",how="returned"} 1
# HELP backpressure_broker_offered_leases Leases outstanding lent from offering pods' own permits; not counted against the capacity.
# TYPE backpressure_broker_offered_leases gauge
backpressure_broker_offered_leases{gate="g"} 1
# HELP backpressure_broker_offering_pods Pods offering their idle permits to this server (an Offer stream open).
# TYPE backpressure_broker_offering_pods gauge
backpressure_broker_offering_pods{gate="g"} 2
# HELP backpressure_broker_offers_total Asks of offering pods for one of their idle permits, by outcome: granted, refused, or timeout (no answer while the borrow waited for one).
# TYPE backpressure_broker_offers_total counter
backpressure_broker_offers_total{gate="g",outcome="granted"} 1
backpressure_broker_offers_total{gate="g",outcome="refused"} 0
backpressure_broker_offers_total{gate="g",outcome="timeout"} 0
# HELP backpressure_broker_learning 1 while the server waits out the leases an earlier run may have granted, lending nothing; else 0.
# TYPE backpressure_broker_learning gauge
backpressure_broker_learning 0
# HELP backpressure_broker_refusals_total Borrows refused, by reason, all gates together.
# TYPE backpressure_broker_refusals_total counter
backpressure_broker_refusals_total{reason="exhausted"} 1
backpressure_broker_refusals_total{reason="hold_too_long"} 0
backpressure_broker_refusals_total{reason="learning"} 1
backpressure_broker_refusals_total{reason="unknown_gate"} 1
backpressure_broker_refusals_total{reason="withdrawn"} 0
# HELP backpressure_broker_waiting Borrows waiting for a permit.
# TYPE backpressure_broker_waiting gauge
backpressure_broker_waiting{gate="g"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if _, err := broker.New(broker.Options{Registerer: reg}); err == nil {
		t.Error("a second Broker registered the same metrics without error")
	}
}
