package sizing

import (
	"fmt"
	"math"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// PerPod is one pod's share of the contract: the share the published plan
// gives it (plan.PodShare, the one model of a per-pod number, whose bounds
// and meaning plan.Fields lists), the durations every pod shares, and the
// capacity its permits sustain.
type PerPod struct {
	plan.PodShare
	// CapacityPerSecond is μ = Permits / Latency, the calls per second the
	// permits complete at the typical latency.
	CapacityPerSecond float64
	// MaxQueueWait is the queue wait budget Qw.
	MaxQueueWait time.Duration
	// AcquireTimeout is the longest a caller waits for a permit.
	AcquireTimeout time.Duration
}

// QueueWaitRule says where a result's MaxQueueWait came from.
type QueueWaitRule int

const (
	// QueueWaitGiven means the input's MaxQueueWait was used; it fits the
	// deadline.
	QueueWaitGiven QueueWaitRule = iota
	// QueueWaitDerived means no MaxQueueWait was given: the wait is half of
	// Deadline − Latency.
	QueueWaitDerived
	// QueueWaitClamped means the given MaxQueueWait did not fit: the wait is
	// Deadline − Latency.
	QueueWaitClamped
	// QueueWaitNone means Deadline ≤ Latency leaves no time to queue: the
	// wait is 0.
	QueueWaitNone
)

// Demand compares the expected demand with what the shares hand out.
type Demand struct {
	// InFlight is Little's L = λ·W, the calls in flight the demand needs.
	InFlight float64
	// WorstInFlight is λ·Wmax; 0 when the worst latency is unknown.
	WorstInFlight float64
	// Available is min(Permits·N, C): the calls the pods may hold in flight
	// that the downstream also accepts.
	Available int
	// GoodputCeilingPerSecond is Available / W, the most calls per second
	// the shares complete at the typical latency.
	GoodputCeilingPerSecond float64
	// ShedFraction is max(0, 1 − Available / InFlight), the part of the
	// demand shed locally at the typical latency.
	ShedFraction float64
	// WorstShedFraction is the same at the worst latency; 0 when unknown.
	WorstShedFraction float64
}

// Result is the pods' shares with the figures behind them.
type Result struct {
	// PerPod is the share of a pod holding Base permits.
	PerPod PerPod
	// PerPodExtra is the share of a pod holding Base+1 permits; nil when
	// Extra is 0.
	PerPodExtra *PerPod
	// Usable is A, the permits handed out over the pods: floor(C'·s) for
	// the part C' of the concurrency this cluster uses, or the caller's
	// part of a shared contract.
	Usable int64
	// Base is floor(A/N), the permits of every pod; Extra pods hold one more.
	Base int64
	// Extra is A mod N: the number of pods holding Base+1.
	Extra int64
	// Share is A/N, the permits per pod before the division into whole
	// permits.
	Share float64
	// TotalPermits is the calls all pods may hold in flight together once
	// the shares are handed over: A, or N when AtLeastOne raised every pod
	// to one permit.
	TotalPermits int64
	// QueueWaitRule says how PerPod.MaxQueueWait was chosen.
	QueueWaitRule QueueWaitRule
	// DemandWorkers is ceil(λ/N · W), the workers Little's law asks for
	// before the cap by permits; 0 when the demand is unknown.
	DemandWorkers int
	// Demand compares demand with the shares; nil when the demand is unknown.
	Demand *Demand
	// Diagnostics are the findings, in a fixed order.
	Diagnostics []Diagnostic

	// UsableRatePerSecond is the rate handed out over the pods, in
	// proportion to their permits; 0 when there is no rate limit.
	UsableRatePerSecond float64
	// UsableBurst is the burst handed out over the pods the same way.
	UsableBurst int64
	// UsableRetryBudgetPerSecond is the retry budget handed out the same
	// way.
	UsableRetryBudgetPerSecond float64
	// Latency is the typical latency W the shares are sized for.
	Latency time.Duration
}

// Size sizes the pods' shares for in. It returns an *InputError, and no
// result, when in is invalid.
func Size(in Input) (Result, error) {
	if err := in.Validate(); err != nil {
		return Result{}, err
	}
	p := sizer{in: in}
	p.usable()
	p.permits()
	p.rate()
	p.queue()
	p.workers()
	p.out.PerPod = p.out.ShareFor(int(p.out.Base))
	if p.out.Extra > 0 {
		extra := p.out.ShareFor(int(p.out.Base + 1))
		p.out.PerPodExtra = &extra
	}
	p.demand()
	p.rateAgainstConcurrency()
	p.retries()
	return p.out, nil
}

// Division returns the exact division of r's usable permits over pods
// pods, whose methods state it in every message, table and event.
func (r Result) Division(pods int) division.Even {
	return division.Even{
		Usable: r.Usable, Pods: int64(pods), Base: r.Base, Extra: r.Extra,
		RaisedToOne: r.TotalPermits > r.Usable,
	}
}

// ShareFor returns the share of a pod holding permits: the waiting room
// (at most plan.MaxQueueCapacity) and the dispatcher sized for them, and the pod's part of the usable rate,
// burst and retry budget in proportion to its permits, so that the pods
// together never get more than the usable totals. A pod with permits but a
// burst below one is raised to one, as Size's BurstRaisedToOne says.
func (r Result) ShareFor(permits int) PerPod {
	pp := r.PerPod
	p := int64(max(permits, 0))
	pp.Permits = int(p)
	pp.CapacityPerSecond = perSecond(p, r.Latency)
	pp.QueueCapacity = r.queueCapacity(p)
	pp.Workers = int(p)
	if r.DemandWorkers > 0 {
		pp.Workers = min(pp.Workers, r.DemandWorkers)
	}
	pp.RatePerSecond, pp.Burst, pp.RetryBudgetPerSecond = 0, 0, 0
	if total := r.TotalPermits; total > 0 && p > 0 {
		if r.UsableRatePerSecond > 0 {
			pp.RatePerSecond = ratio(r.UsableRatePerSecond, p, total)
			pp.Burst = int(max(1, mulDivFloor(r.UsableBurst, p, total)))
		}
		pp.RetryBudgetPerSecond = ratio(r.UsableRetryBudgetPerSecond, p, total)
	}
	return pp
}

// ShareWithReserve returns the share of a pod holding permits whose quota
// keeps reserve permits at a permit server: ShareFor(permits), with the
// waiting room sized for the permits that can serve its waiters,
// floor((permits + reserve) × MaxQueueWait / Latency), at most
// plan.MaxQueueCapacity.
//
// A call that finds its pod's permits taken waits for one of them and, at
// the same time, for a reserve permit, and runs on whichever comes first;
// so permits + reserve permits can free up for the pod's waiters, and by
// Little's law over them the waiting room holds the calls that can be
// served within MaxQueueWait. Sized by the pod's own permits only, the
// sample's pods of 4 (40 usable, reserve 8, over 8 pods) would have a room
// of floor(4 × 40 ms / 220 ms) = 0, and a call that finds it full could
// wait only for a reserve permit, not for its own pod's; counted, the room is
// floor(12 × 40 / 220) = 2. A waiting call holds nothing downstream, so
// the permits in flight, and the contract, are as before; and a call
// waits no longer than MaxQueueWait, as before, so the deadline budget
// holds. The pods' rooms together may exceed what the reserve alone
// serves within the wait (every pod counts the whole reserve); those
// waiters are then served by their own pod's permits or leave at
// MaxQueueWait, as in any waiting room.
//
// A pod holding no permits gets no waiting room, as from ShareFor (the
// published plan requires it): its calls wait for a reserve permit alone.
// Without a reserve
// (reserve ≤ 0) it is ShareFor(permits).
func (r Result) ShareWithReserve(permits, reserve int) PerPod {
	pp := r.ShareFor(permits)
	if pp.Permits == 0 || reserve <= 0 {
		return pp
	}
	pp.QueueCapacity = r.queueCapacity(int64(pp.Permits) + min(int64(reserve), math.MaxInt64-int64(pp.Permits)))
	return pp
}

// queueCapacity is the waiting room for n permits that can serve its
// waiters: floor(n × MaxQueueWait / Latency), at most
// plan.MaxQueueCapacity.
func (r Result) queueCapacity(n int64) int {
	return int(min(mulDivFloor(n, int64(r.PerPod.MaxQueueWait), int64(r.Latency)), plan.MaxQueueCapacity))
}

// sizer accumulates one result; each step reads the input and what the
// steps before it computed.
type sizer struct {
	in  Input
	out Result
}

func (p *sizer) diagnose(reason, format string, args ...any) {
	p.out.Diagnostics = append(p.out.Diagnostics, Diagnostic{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// usable computes A and the usable rate, burst and retry budget: a shared
// contract's part as given, else the cluster's part of the contract times
// the safety percentage, in integers.
func (p *sizer) usable() {
	in := p.in
	p.out.Latency = in.Latency
	if in.Part != nil {
		p.out.Usable = int64(in.Part.Permits)
		p.out.UsableRatePerSecond = in.Part.RatePerSecond
		p.out.UsableBurst = int64(in.Part.Burst)
		p.out.UsableRetryBudgetPerSecond = in.Part.RetryBudgetPerSecond
		return
	}
	c, cc, pct := int64(in.Concurrency), int64(in.clusterConcurrency()), int64(in.SafetyPercent)
	p.out.Usable = cc * pct / 100
	if in.RatePerSecond > 0 {
		p.out.UsableRatePerSecond = ratio(in.RatePerSecond, cc*pct, 100*c)
		p.out.UsableBurst = mulDivFloor(int64(in.Burst), cc*pct, 100*c)
	}
	p.out.UsableRetryBudgetPerSecond = in.RetryBudgetPerSecond
}

// permits divides A exactly: Base = floor(A/N) for every pod and one more
// for A mod N of them, and applies the below-one policy.
func (p *sizer) permits() {
	a, n := p.out.Usable, int64(p.in.Divisor)
	p.out.Base, p.out.Extra = a/n, a%n
	p.out.Share = float64(a) / float64(n)
	p.out.TotalPermits = a
	if p.out.Base > 0 {
		return
	}
	// The share per pod is cut, not rounded, as the events and the CLI
	// state it (division.Even.PerPod): 0.999 is not one permit.
	split := fmt.Sprintf("%s over %s is %s per pod", p.usableText(), division.Replicas(n), p.out.Division(p.in.Divisor).PerPod())
	switch p.in.BelowOne {
	case Strict:
		if a == 0 {
			p.diagnose(ReasonQuotaTooSmall, "%s; Strict leaves every pod at 0 permits, so no call reaches the downstream", split)
			return
		}
		p.diagnose(ReasonQuotaTooSmall, "%s; Strict gives %d of the pods 1 permit each and leaves the other %d at 0, so they shed every call; each pod gets a whole permit only up to %s",
			split, a, n-a, division.Replicas(a))
	case AtLeastOne:
		p.out.Base, p.out.Extra, p.out.TotalPermits = 1, 0, n
		c := int64(p.in.Concurrency)
		p.diagnose(ReasonOvercommitted, "%s; AtLeastOne raised every pod to 1 permit, so the pods together hold up to %d in flight against a contract of %d: %s",
			split, n, c, overcommit(n, c, float64(a), int64(p.in.SafetyPercent)))
	}
}

// usableText states how A was computed: "50 × 80% = 40 permits", with
// floor() when the product is not whole.
func (p *sizer) usableText() string {
	in := p.in
	if in.Part != nil {
		return fmt.Sprintf("this caller's part of %d permits", p.out.Usable)
	}
	product := fmt.Sprintf("%d × %d%%", in.Concurrency, in.SafetyPercent)
	if in.ClusterConcurrency > 0 && in.ClusterConcurrency < in.Concurrency {
		product = fmt.Sprintf("%d of %d for this cluster × %d%%", in.ClusterConcurrency, in.Concurrency, in.SafetyPercent)
	}
	if int64(in.clusterConcurrency())*int64(in.SafetyPercent)%100 != 0 {
		product = "floor(" + product + ")"
	}
	return fmt.Sprintf("%s = %s", product, division.Permits(p.out.Usable))
}

func overcommit(total, contract int64, handedOut float64, pct int64) string {
	if total > contract {
		return fmt.Sprintf("overcommitted by %d (%s× the contract)", total-contract, num(float64(total)/float64(contract)))
	}
	return fmt.Sprintf("within the contract, but %s above the %s handed out at %d%% safety",
		num(float64(total)-handedOut), num(handedOut), pct)
}

// rate notes a burst too small for every pod holding permits to get one:
// the pod holding the fewest permits (Base, or 1 when Strict gives A < N
// pods one permit each) gets the smallest part of the usable burst.
func (p *sizer) rate() {
	if p.out.UsableRatePerSecond == 0 || p.out.TotalPermits == 0 {
		return
	}
	least := max(p.out.Base, 1)
	if burst := mulDivFloor(p.out.UsableBurst, least, p.out.TotalPermits); burst < 1 {
		p.diagnose(ReasonBurstRaisedToOne, "usable burst %d × %d of %d permits is %s for a pod holding %s; raised to 1 so each pod's token bucket admits a call, so the pods together may burst %d against a usable burst of %d",
			p.out.UsableBurst, least, p.out.TotalPermits, num(float64(p.out.UsableBurst)*float64(least)/float64(p.out.TotalPermits)),
			division.Permits(least), p.out.totalBurst(int64(p.in.Divisor)), p.out.UsableBurst)
	}
}

// totalBurst returns the sum of the bursts ShareFor gives the n pods of the
// division: n − Extra pods at Base and Extra pods at Base+1.
func (r Result) totalBurst(n int64) int64 {
	burst := func(permits int64) int64 {
		if permits == 0 || r.UsableRatePerSecond == 0 || r.TotalPermits == 0 {
			return 0
		}
		return max(1, mulDivFloor(r.UsableBurst, permits, r.TotalPermits))
	}
	return (n-r.Extra)*burst(r.Base) + r.Extra*burst(r.Base+1)
}

// queue chooses the queue wait budget, the waiting room and the acquire
// timeout, and checks the worst latency against the deadline.
func (p *sizer) queue() {
	w, d := p.in.Latency, p.in.Deadline
	room := d - w
	var wait time.Duration
	switch {
	case room <= 0:
		p.out.QueueWaitRule = QueueWaitNone
		p.diagnose(ReasonDeadlineBelowLatency, "deadline %s − typical latency %s = %s leaves no time to queue: max queue wait and queue capacity are 0",
			d, w, room)
	case p.in.MaxQueueWait == nil:
		p.out.QueueWaitRule = QueueWaitDerived
		wait = room / 2
	case *p.in.MaxQueueWait > room:
		p.out.QueueWaitRule = QueueWaitClamped
		wait = room
		p.diagnose(ReasonQueueWaitClamped, "max queue wait %s + typical latency %s = %s exceeds the deadline %s: queue wait budget lowered to %s − %s = %s",
			*p.in.MaxQueueWait, w, sum(*p.in.MaxQueueWait, w), d, d, w, room)
	default:
		p.out.QueueWaitRule = QueueWaitGiven
		wait = *p.in.MaxQueueWait
	}
	pp := &p.out.PerPod
	pp.MaxQueueWait = wait
	pp.AcquireTimeout = wait
	if p.in.AcquireTimeout != nil && *p.in.AcquireTimeout < wait {
		pp.AcquireTimeout = *p.in.AcquireTimeout
	}

	worst := p.in.WorstLatency
	if worst == 0 || p.out.QueueWaitRule == QueueWaitNone {
		return
	}
	if worst > d-wait {
		if worst > d {
			p.diagnose(ReasonWorstLatencyExceedsDeadline, "worst latency %s exceeds the deadline %s: calls at worst latency miss it even without queueing",
				worst, d)
		} else {
			p.diagnose(ReasonWorstLatencyExceedsDeadline, "queue wait %s + worst latency %s = %s exceeds the deadline %s: calls that queue and then meet the worst latency miss it",
				wait, worst, sum(wait, worst), d)
		}
	}
}

// workers sizes the dispatcher by Little's law; ShareFor caps it by each
// pod's permits.
func (p *sizer) workers() {
	if p.in.DemandPerSecond > 0 {
		need := ceilRatio(p.in.DemandPerSecond, int64(p.in.Latency), nanosPerSecond*int64(p.in.Divisor), MaxCount)
		p.out.DemandWorkers = int(need)
	}
}

// demand compares λ·W and λ·Wmax with the in-flight calls available.
func (p *sizer) demand() {
	lambda := p.in.DemandPerSecond
	if lambda == 0 {
		return
	}
	w, worst := p.in.Latency, p.in.WorstLatency
	available := min(p.out.TotalPermits, int64(p.in.Concurrency))
	dem := &Demand{
		InFlight:                inFlight(lambda, w),
		Available:               int(available),
		GoodputCeilingPerSecond: perSecond(available, w),
	}
	dem.ShedFraction = shed(float64(available), dem.InFlight)
	if worst > 0 {
		dem.WorstInFlight = inFlight(lambda, worst)
		dem.WorstShedFraction = shed(float64(available), dem.WorstInFlight)
	}
	p.out.Demand = dem

	holds := p.out.Division(p.in.Divisor).Holds()
	if p.out.TotalPermits > available {
		holds += fmt.Sprintf(", of which the contract accepts %d", available)
	}
	switch {
	case dem.ShedFraction > 0:
		msg := fmt.Sprintf("demand %s × typical latency %s = %s calls in flight against %d available (%s): goodput ceiling %d / %s = %s, so %s of the demand will be shed",
			rate(lambda), w, num(dem.InFlight), available, holds, available, w, rate(dem.GoodputCeilingPerSecond), percent(dem.ShedFraction))
		if worst > 0 {
			msg += fmt.Sprintf("; at worst latency %s it needs %s in flight and %s is shed", worst, num(dem.WorstInFlight), percent(dem.WorstShedFraction))
		}
		p.diagnose(ReasonDemandExceedsQuota, "%s", msg)
	case dem.WorstShedFraction > 0:
		p.diagnose(ReasonDemandExceedsQuotaAtWorstLatency, "demand %s × worst latency %s = %s calls in flight against %d available (%s): at worst latency the goodput ceiling is %d / %s = %s, so %s of the demand will be shed",
			rate(lambda), worst, num(dem.WorstInFlight), available, holds, available, worst, rate(perSecond(available, worst)), percent(dem.WorstShedFraction))
	}
}

// shed returns max(0, 1 − available/need); it is 0 whenever need fits.
func shed(available, need float64) float64 {
	if need <= available {
		return 0
	}
	return 1 - available/need
}

// rateAgainstConcurrency checks R·W and R·Wmax against C.
func (p *sizer) rateAgainstConcurrency() {
	r := p.in.RatePerSecond
	if r == 0 {
		return
	}
	c := p.in.Concurrency
	if l := inFlight(r, p.in.Latency); l > float64(c) {
		p.diagnose(ReasonRateAllowsExcessInFlight, "rate %s × typical latency %s = %s calls in flight, above the concurrency %d: the rate limit alone does not bound in-flight calls; the permits do",
			rate(r), p.in.Latency, num(l), c)
		return
	}
	if worst := p.in.WorstLatency; worst > 0 {
		if l := inFlight(r, worst); l > float64(c) {
			p.diagnose(ReasonRateAllowsExcessInFlight, "rate %s × worst latency %s = %s calls in flight, above the concurrency %d: when latency rises the rate limit alone does not bound in-flight calls; the permits do",
				rate(r), worst, num(l), c)
		}
	}
}

// retries notes retries that cannot happen; ShareFor divides the budget.
func (p *sizer) retries() {
	if p.in.MaxRetries > 0 && p.out.UsableRetryBudgetPerSecond == 0 {
		p.diagnose(ReasonRetriesWithoutBudget, "max retries %d with a retry budget of 0/s: retries are spent only from the budget, so no call will be retried",
			p.in.MaxRetries)
	}
}
