package broker

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
)

// refusalCounts counts refusals by reason, for every gate together: an
// unknown gate's name comes from the caller and would make a label of
// unbounded values.
type refusalCounts [reservev1.Reason_REASON_WITHDRAWN + 1]atomic.Uint64

func (c *refusalCounts) add(r reservev1.Reason) {
	if int(r) < len(c) {
		c[r].Add(1)
	}
}

var (
	capacityDesc = prometheus.NewDesc("backpressure_broker_capacity",
		"Permits of the gate's reserve this server may lend: the capacity in force.", []string{"gate"}, nil)
	leasesDesc = prometheus.NewDesc("backpressure_broker_leases",
		"Leases outstanding; above the capacity only after it shrank, until enough have ended.", []string{"gate"}, nil)
	waitingDesc = prometheus.NewDesc("backpressure_broker_waiting",
		"Borrows waiting for a permit.", []string{"gate"}, nil)
	endedDesc = prometheus.NewDesc("backpressure_broker_leases_ended_total",
		"Leases ended, of the reserve and offered together, by how: returned by the borrower, or expired at the end of their time.", []string{"gate", "how"}, nil)
	borrowsDesc = prometheus.NewDesc("backpressure_broker_borrows_total",
		"Borrows by pod and result (granted or refused): the demand beyond each pod's own share. A pod's series goes away after it stops borrowing.", []string{"gate", "pod", "result"}, nil)
	refusalsDesc = prometheus.NewDesc("backpressure_broker_refusals_total",
		"Borrows refused, by reason, all gates together.", []string{"reason"}, nil)
	learningDesc = prometheus.NewDesc("backpressure_broker_learning",
		"1 while the server waits out the leases an earlier run may have granted, lending nothing; else 0.", nil, nil)
	offersDesc = prometheus.NewDesc("backpressure_broker_offers_total",
		"Asks of offering pods for one of their idle permits, by outcome: granted, refused, or timeout (no answer while the borrow waited for one).", []string{"gate", "outcome"}, nil)
	offeredLeasesDesc = prometheus.NewDesc("backpressure_broker_offered_leases",
		"Leases outstanding lent from offering pods' own permits; not counted against the capacity.", []string{"gate"}, nil)
	offeringPodsDesc = prometheus.NewDesc("backpressure_broker_offering_pods",
		"Pods offering their idle permits to this server (an Offer stream open).", []string{"gate"}, nil)
)

// Collector returns the Broker's metrics, read from its state at each
// scrape. New registers it with Options.Registerer when one is given.
func (b *Broker) Collector() prometheus.Collector { return collector{b} }

type collector struct{ b *Broker }

// Describe sends every metric's description.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{capacityDesc, leasesDesc, waitingDesc, endedDesc, borrowsDesc, refusalsDesc, learningDesc,
		offersDesc, offeredLeasesDesc, offeringPodsDesc} {
		ch <- d
	}
}

// Collect reads the Broker's state under its locks, one gate at a time.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	learning := 0.0
	if b.clock.Now().Before(b.learningUntil) {
		learning = 1
	}
	gauge(learningDesc, learning)
	for r := range b.refusals {
		if r != int(reservev1.Reason_REASON_UNSPECIFIED) {
			counter(refusalsDesc, b.refusals[r].Load(), reasonLabel(reservev1.Reason(r)))
		}
	}
	b.eachPool(func(p *pool) {
		gauge(capacityDesc, float64(p.capacity), p.gate)
		gauge(leasesDesc, float64(len(p.leases)), p.gate)
		gauge(waitingDesc, float64(p.waiting.Len()), p.gate)
		counter(endedDesc, p.returned, p.gate, "returned")
		counter(endedDesc, p.expired, p.gate, "expired")
		counter(offersDesc, p.offers.granted, p.gate, "granted")
		counter(offersDesc, p.offers.refused, p.gate, "refused")
		counter(offersDesc, p.offers.timedOut, p.gate, "timeout")
		gauge(offeredLeasesDesc, float64(len(p.offered)), p.gate)
		gauge(offeringPodsDesc, float64(p.offeringPodsLocked()), p.gate)
		for pod, t := range p.pods {
			counter(borrowsDesc, t.granted, p.gate, pod, "granted")
			counter(borrowsDesc, t.refused, p.gate, pod, "refused")
		}
	})
}

// reasonLabel is a reason's label value: REASON_HOLD_TOO_LONG is
// "hold_too_long".
func reasonLabel(r reservev1.Reason) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "REASON_"))
}
