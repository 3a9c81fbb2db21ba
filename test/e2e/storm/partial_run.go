//go:build unix

package storm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// podEndpoints are the Ready pods of the partial-load workload, as a
// Service's endpoints: the scenario's balancer picks among them itself.
type podEndpoints struct {
	mu   sync.Mutex
	urls map[string]bool
}

func newPodEndpoints() *podEndpoints { return &podEndpoints{urls: map[string]bool{}} }

// Add makes url a Ready pod's.
func (e *podEndpoints) Add(url string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.urls[url] = true
}

// Remove takes url out.
func (e *podEndpoints) Remove(url string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.urls, url)
}

// sorted returns the Ready pods' URLs in a fixed order: the balancer's pod
// i is the i-th.
func (e *podEndpoints) sorted() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.urls))
}

// partialCounts are what the calls after the warm-up found.
type partialCounts struct {
	calls, admitted, shed, failed atomic.Int64
	global, equal                 atomic.Int64
	late                          atomic.Int64
}

// lateBy is how late a call may be sent before the harness counts it as
// fallen behind.
const lateBy = 20 * time.Millisecond

// inProcessGates are the global gate of the usable permits and the equal
// shares without a reserve, each with the waiting room the plan's rule
// gives its permits, made with the library's gate.
func inProcessGates() (*gate.Gate, []*gate.Gate, error) {
	sz, err := quota.Size(PartialQuotaSpec(), PartialPods)
	if err != nil {
		return nil, nil, err
	}
	limits := func(permits int) gate.Limits {
		pp := sz.Result.ShareFor(permits)
		return gate.Limits{Permits: permits, QueueCapacity: pp.QueueCapacity, MaxQueueWait: pp.MaxQueueWait,
			AcquireTimeout: pp.AcquireTimeout, TypicalLatency: sz.Result.Latency}
	}
	global, err := gate.New("global", limits(Usable()))
	if err != nil {
		return nil, nil, err
	}
	var equal []*gate.Gate
	for i := range PartialPods {
		g, err := gate.New(fmt.Sprintf("equal-%d", i), limits(Usable()/PartialPods))
		if err != nil {
			return nil, nil, err
		}
		equal = append(equal, g)
	}
	return global, equal, nil
}

// sleepOn holds a permit of g for latency, the virtual downstream's call,
// and says whether g admitted it.
func sleepOn(g *gate.Gate, latency time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), PartialDeadline)
	defer cancel()
	p, err := g.Acquire(ctx)
	if err != nil {
		return false
	}
	time.Sleep(latency)
	p.Release()
	return true
}

// run sends the scenario's calls, each at once to its pod, to the global
// gate and to its pod's equal share, and measures.
func (st *partialStage) run(ctx context.Context) (*PartialLoadRun, error) {
	urls := st.endpoints.sorted()
	if len(urls) != PartialPods {
		return nil, fmt.Errorf("storm: partial load: %d Ready pods, want %d", len(urls), PartialPods)
	}
	global, equal, err := inProcessGates()
	if err != nil {
		return nil, err
	}
	calls := partialCalls(PartialSeed, lossmodel.Balancer(st.balancer), PartialPods, PartialSkew, partialPerSecond(),
		PartialLatency, PartialLatencyCV, st.duration)
	client := traffic.NewLoadClient(RequestTimeout)
	var n partialCounts
	var wg sync.WaitGroup
	var atWarmup, atEnd gateCounters
	var brokerAtWarmup brokerCounters
	var expiredErr error
	outcomes := make([]traffic.Outcome, len(calls))
	start := time.Now()
	st.loadStart = start
	stopKill := make(chan struct{})
	if st.killAt > 0 {
		st.kill = st.startBrokerKill(ctx, start, stopKill)
	}
	warmupDone := make(chan struct{})
	go func() {
		defer close(warmupDone)
		select {
		case <-time.After(st.warmup):
			atWarmup = scrapeGateCounters(ctx, st.obs.MetricsAddrs())
			brokerAtWarmup, expiredErr = st.scrapeBroker(ctx)
		case <-ctx.Done():
		}
	}()
	for i, c := range calls {
		if d := time.Until(start.Add(c.At)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
		}
		counted := c.At >= st.warmup
		if counted {
			n.calls.Add(1)
			if time.Since(start.Add(c.At)) > lateBy {
				n.late.Add(1)
			}
		}
		wg.Go(func() {
			if sleepOn(global, c.Latency) && counted {
				n.global.Add(1)
			}
		})
		wg.Go(func() {
			if sleepOn(equal[c.Pod], c.Latency) && counted {
				n.equal.Add(1)
			}
		})
		wg.Go(func() {
			outcome := callPod(ctx, client, urls[c.Pod], c.Latency)
			outcomes[i] = outcome
			if !counted {
				return
			}
			switch outcome {
			case traffic.OutcomeOK:
				n.admitted.Add(1)
			case traffic.OutcomeShed:
				n.shed.Add(1)
			default:
				n.failed.Add(1)
			}
		})
	}
	wg.Wait()
	close(stopKill)
	if st.kill != nil {
		st.kill.finish(st, calls, outcomes)
	}
	<-warmupDone
	atEnd = scrapeGateCounters(ctx, st.obs.MetricsAddrs())
	brokerAtEnd, err := st.scrapeBroker(ctx)
	if expiredErr == nil {
		expiredErr = err
	}
	end := time.Now()
	final := st.downstream.Sample()

	r := &PartialLoadRun{
		Balancer: st.balancer, Pods: PartialPods, Usable: Usable(), Reserve: PartialReserve, Contract: Contract,
		OfferedLoad: PartialLoad, CallsPerSecond: partialPerSecond(), WarmupSeconds: st.warmup.Seconds(),
		MeasuredSeconds: (st.duration - st.warmup).Seconds(),
		Calls:           n.calls.Load(), Admitted: n.admitted.Load(), Shed: n.shed.Load(), Failed: n.failed.Load(),
		Late:               n.late.Load(),
		GlobalGateAdmitted: n.global.Load(), EqualSharesAdmitted: n.equal.Load(),
		PeakInFlight: final.Peak, Downstream429: final.Rejected,
	}
	r.AdmittedRatioToGlobalGate = ratioOf(r.Admitted, r.GlobalGateAdmitted)
	r.EqualSharesRatioToGlobalGate = ratioOf(r.EqualSharesAdmitted, r.GlobalGateAdmitted)
	if atWarmup.err != nil || atEnd.err != nil {
		return nil, fmt.Errorf("storm: partial load: scraping the pods' gates: %w", errors.Join(atWarmup.err, atEnd.err))
	}
	r.GateAdmitted, r.Borrowed = atEnd.admitted-atWarmup.admitted, atEnd.borrowed-atWarmup.borrowed
	r.NotLent, r.BorrowFailed = atEnd.notLent-atWarmup.notLent, atEnd.failed-atWarmup.failed
	r.LoansReturnedEarly = atEnd.returnedEarly - atWarmup.returnedEarly
	r.LentOut = atEnd.lentOut - atWarmup.lentOut
	r.BorrowedFraction = ratioOf(r.Borrowed, r.GateAdmitted+r.Borrowed)
	if st.reserve() > 0 && st.killAt == 0 {
		if expiredErr != nil {
			return nil, fmt.Errorf("storm: partial load: scraping the permit server: %w", expiredErr)
		}
		expired := brokerAtEnd.expired - brokerAtWarmup.expired
		r.LeasesExpired = &expired
		r.OffersGranted = brokerAtEnd.granted - brokerAtWarmup.granted
		r.OffersRefused = brokerAtEnd.refused - brokerAtWarmup.refused
		r.OffersTimedOut = brokerAtEnd.timedOut - brokerAtWarmup.timedOut
	}
	moves := divisionMoves(st.obs.Published(), start.Add(st.warmup), end)
	r.DivisionChanges, r.ShortestMoveGapSeconds = len(moves), shortestGap(moves).Seconds()
	r.DivisionChangesPerMinute = float64(r.DivisionChanges) / end.Sub(start.Add(st.warmup)).Minutes()
	pred, err := PredictPartialLoad(lossmodel.Balancer(st.balancer))
	if err != nil {
		return nil, err
	}
	r.PredictedRatio, r.PredictedEqualSharesRatio, r.PredictedBorrowedFraction = pred.Ratio, pred.EqualSharesRatio, pred.BorrowedFraction
	r.PredictedOwnRoomsRatio, r.PredictedShares = pred.OwnRoomsRatio, pred.Shares
	r.MeanShares = meanShares(st.obs.Published(), st.podNames(urls), start.Add(st.warmup), end)
	if len(r.MeanShares) == st.pods {
		if r.PredictedRatioGivenShares, err = RatioGiven(lossmodel.Balancer(st.balancer), roundShares(r.MeanShares, Usable()-st.reserve())); err != nil {
			return nil, err
		}
	}
	st.h.logf("[%s] %d calls after the warm-up: pods %d (ratio %.3f, model %.3f), equal shares %d (%.3f, model %.3f), global gate %d; borrowed %.3f (refused %d, failed %d, returned early %d, lent out by pods %d); peak %d, 429s %d",
		st.name, r.Calls, r.Admitted, r.AdmittedRatioToGlobalGate, r.PredictedRatio, r.EqualSharesAdmitted, r.EqualSharesRatioToGlobalGate,
		r.PredictedEqualSharesRatio, r.GlobalGateAdmitted, r.BorrowedFraction, r.NotLent, r.BorrowFailed, r.LoansReturnedEarly, r.LentOut, r.PeakInFlight, r.Downstream429)
	if r.LeasesExpired != nil {
		st.h.logf("[%s] the permit server's leases that expired unreturned after the warm-up: %d; its asks of offering pods: %d granted, %d refused, %d not answered in time",
			st.name, *r.LeasesExpired, r.OffersGranted, r.OffersRefused, r.OffersTimedOut)
	}
	st.h.logf("[%s] shares over the measured time, in the balancer's order: %s (model %v)", st.name, formatShares(r.MeanShares), r.PredictedShares)
	return r, nil
}

// partialPerSecond is the offered load in calls per second.
func partialPerSecond() float64 { return PartialLoad * float64(Usable()) / PartialLatency.Seconds() }

func ratioOf(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// callPod sends one call to a pod, asking the downstream for its latency.
func callPod(ctx context.Context, client *http.Client, podURL string, latency time.Duration) traffic.Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, podURL+"/?"+url.Values{traffic.LatencyParam: {latency.String()}}.Encode(), nil)
	if err != nil {
		return traffic.OutcomeError
	}
	resp, err := client.Do(req)
	if err != nil {
		return traffic.OutcomeError
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch {
	case resp.StatusCode != http.StatusOK:
		return traffic.OutcomeError
	case resp.Header.Get(traffic.FallbackHeader) != "":
		return traffic.OutcomeShed
	}
	return traffic.OutcomeOK
}

// gateCounters are the pods' gates' counters summed: calls admitted on
// the pods' own permits and on a borrowed one, and borrows refused (none
// to lend) or failed (the permit server not answering within the budget),
// and loans returned early.
type gateCounters struct {
	admitted, borrowed, notLent, failed int64
	// returnedEarly counts loans returned before their calls ended;
	// lentOut the permits lent out to other pods' calls.
	returnedEarly, lentOut int64
	err                    error
}

// scrapeGateCounters sums backpressure_gate_admitted_total,
// backpressure_gate_borrows_total by result,
// backpressure_gate_loans_returned_early_total and
// backpressure_gate_lent_out_total of the quota's gate over the pods of
// addrs.
func scrapeGateCounters(ctx context.Context, addrs map[string]string) gateCounters {
	var out gateCounters
	admitted := fmt.Sprintf("backpressure_gate_admitted_total{gate=%q} ", QuotaName)
	borrows := func(result string) string {
		return fmt.Sprintf("backpressure_gate_borrows_total{gate=%q,result=%q} ", QuotaName, result)
	}
	counters := map[string]*int64{admitted: &out.admitted, borrows("borrowed"): &out.borrowed,
		borrows("not_lent"): &out.notLent, borrows("failed"): &out.failed,
		fmt.Sprintf("backpressure_gate_loans_returned_early_total{gate=%q} ", QuotaName): &out.returnedEarly,
		fmt.Sprintf("backpressure_gate_lent_out_total{gate=%q} ", QuotaName):             &out.lentOut}
	for _, pod := range slices.Sorted(maps.Keys(addrs)) {
		if err := addCounters(ctx, pod, addrs[pod], counters); err != nil {
			out.err = err
			return out
		}
	}
	return out
}

// brokerCounters are the permit server's counters of the quota's gate.
type brokerCounters struct {
	// expired counts its leases that ended at the end of their time
	// rather than by a return: each is a permit that a borrower never used
	// or never gave back, lent to nobody until it expired.
	expired int64
	// granted, refused and timedOut count its asks of offering pods by
	// outcome.
	granted, refused, timedOut int64
}

// scrapeBroker reads the permit server's counters of the quota's gate.
func (st *partialStage) scrapeBroker(ctx context.Context) (brokerCounters, error) {
	var out brokerCounters
	if st.reserve() == 0 {
		return out, nil
	}
	st.brokersMu.Lock()
	addr := st.brokerMetrics
	st.brokersMu.Unlock()
	if addr == "" {
		return out, errors.New("the permit server logged no metrics address")
	}
	offers := func(outcome string) string {
		return fmt.Sprintf("backpressure_broker_offers_total{gate=%q,outcome=%q} ", QuotaName, outcome)
	}
	err := addCounters(ctx, BrokerName, addr, map[string]*int64{
		fmt.Sprintf("backpressure_broker_leases_ended_total{gate=%q,how=\"expired\"} ", QuotaName): &out.expired,
		offers("granted"): &out.granted, offers("refused"): &out.refused, offers("timeout"): &out.timedOut,
	})
	return out, err
}

// addCounters adds to each of counters the value of the series its key
// (a series' name and labels, then a space) names on the /metrics of one
// process, which must expose every one of them.
func addCounters(ctx context.Context, who, addr string, counters map[string]*int64) error {
	cl := &http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for prefix, sum := range counters {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return fmt.Errorf("%s: %q: %w", who, line, err)
				}
				*sum += int64(f)
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	if found != len(counters) {
		return fmt.Errorf("%s: found %d of the counters %v, want %d", who, found, slices.Collect(maps.Keys(counters)), len(counters))
	}
	return nil
}

// shortestGap returns the shortest time between two of the moves at, and
// 0 when there are fewer than two.
func shortestGap(at []time.Time) time.Duration {
	var out time.Duration
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); i == 1 || gap < out {
			out = gap
		}
	}
	return out
}

// divisionMoves returns when each move of the division published in
// [from, to] was seen. With the same pods throughout, a move lowers some
// pods' shares, told at once, and raises others once those let go (the
// handover): the plan that only raises pods no open move lowered completes
// that move and is not counted again. A plan that lowers a share starts a
// move, and one that raises a share the open move lowered reverses it:
// each is counted, so a share that goes down and back up is two moves.
func divisionMoves(pub []observe.Published, from, to time.Time) []time.Time {
	var moves []time.Time
	lowered := map[string]bool{}
	for i := 1; i < len(pub); i++ {
		if pub[i].Seen.Before(from) || pub[i].Seen.After(to) {
			continue
		}
		down, reversed := map[string]bool{}, false
		for pod := range podsOf(pub[i-1], pub[i]) {
			switch was, now := pub[i-1].PermitsOf(pod), pub[i].PermitsOf(pod); {
			case now < was:
				down[pod] = true
			case now > was && lowered[pod]:
				reversed = true
			}
		}
		if len(down) > 0 || reversed {
			moves = append(moves, pub[i].Seen)
			lowered = down
		}
	}
	return moves
}

// meanShares returns, for each of pods, the permits the plans in pub gave
// it averaged over [from, to): a plan counts from when it was seen until
// the next one was, the last one seen before from counts from from.
func meanShares(pub []observe.Published, pods []string, from, to time.Time) []float64 {
	out := make([]float64, len(pods))
	span := to.Sub(from)
	if span <= 0 {
		return out
	}
	for i, p := range pub {
		start, end := p.Seen, to
		if start.Before(from) {
			start = from
		}
		if i+1 < len(pub) && pub[i+1].Seen.Before(to) {
			end = pub[i+1].Seen
		}
		if !end.After(start) {
			continue
		}
		w := end.Sub(start).Seconds() / span.Seconds()
		for j, pod := range pods {
			out[j] += w * float64(p.PermitsOf(pod))
		}
	}
	return out
}

// formatShares writes shares with one decimal.
func formatShares(shares []float64) string {
	out := make([]string, len(shares))
	for i, v := range shares {
		out[i] = strconv.FormatFloat(v, 'f', 1, 64)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// podNames returns the names of the workload's pods at urls, in their
// order; "" for a URL no pod of the workload had.
func (st *partialStage) podNames(urls []string) []string {
	byURL := map[string]string{}
	for _, l := range st.gateways.Lives() {
		if l.URL != "" {
			byURL[l.URL] = l.Name
		}
	}
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = byURL[u]
	}
	return out
}

// podsOf returns the pods either plan names.
func podsOf(a, b observe.Published) map[string]bool {
	out := map[string]bool{}
	for pod := range a.Pods {
		out[pod] = true
	}
	for pod := range b.Pods {
		out[pod] = true
	}
	return out
}
