package sizing

import (
	"fmt"
	"time"
)

// PerPod is one pod's share of the contract.
type PerPod struct {
	// Permits is the pod's in-flight limit (semaphore size).
	Permits int
	// RatePerSecond is the pod's token-bucket rate; 0 means no rate limit.
	RatePerSecond float64
	// Burst is the pod's token-bucket size; 0 when there is no rate limit.
	Burst int
	// CapacityPerSecond is μ = Permits / Latency, the calls per second the
	// permits complete at the typical latency.
	CapacityPerSecond float64
	// QueueCapacity is the size of the pod's waiting room.
	QueueCapacity int
	// MaxQueueWait is the queue wait budget Qw.
	MaxQueueWait time.Duration
	// AcquireTimeout is the longest a caller waits for a permit.
	AcquireTimeout time.Duration
	// Workers is the dispatcher's worker count.
	Workers int
	// RetryBudgetPerSecond is the pod's share of the retry budget.
	RetryBudgetPerSecond float64
}

// QueueWaitRule says where a plan's MaxQueueWait came from.
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

// Demand compares the expected demand with what the plan hands out.
type Demand struct {
	// InFlight is Little's L = λ·W, the calls in flight the demand needs.
	InFlight float64
	// WorstInFlight is λ·Wmax; 0 when the worst latency is unknown.
	WorstInFlight float64
	// Available is min(Permits·N, C): the calls the pods may hold in flight
	// that the downstream also accepts.
	Available int
	// GoodputCeilingPerSecond is Available / W, the most calls per second
	// the plan completes at the typical latency.
	GoodputCeilingPerSecond float64
	// ShedFraction is max(0, 1 − Available / InFlight), the part of the
	// demand shed locally at the typical latency.
	ShedFraction float64
	// WorstShedFraction is the same at the worst latency; 0 when unknown.
	WorstShedFraction float64
}

// PlanResult is a per-pod plan with the figures behind it.
type PlanResult struct {
	// PerPod is each pod's share.
	PerPod PerPod
	// Share is C·s/N, the permits per pod before rounding down.
	Share float64
	// TotalPermits is Permits·N, the calls all pods may hold in flight
	// together.
	TotalPermits int64
	// QueueWaitRule says how PerPod.MaxQueueWait was chosen.
	QueueWaitRule QueueWaitRule
	// DemandWorkers is ceil(λ/N · W), the workers Little's law asks for
	// before the cap by permits; 0 when the demand is unknown.
	DemandWorkers int
	// Demand compares demand with the plan; nil when the demand is unknown.
	Demand *Demand
	// Diagnostics are the plan's findings, in a fixed order.
	Diagnostics []Diagnostic
}

// Plan computes the per-pod plan for in. It returns an *InputError, and no
// plan, when in is invalid.
func Plan(in Input) (PlanResult, error) {
	if err := in.Validate(); err != nil {
		return PlanResult{}, err
	}
	p := planner{in: in}
	p.permits()
	p.rate()
	p.queue()
	p.workers()
	p.demand()
	p.rateAgainstConcurrency()
	p.retries()
	return p.out, nil
}

// planner accumulates one plan; each step reads the input and what the
// steps before it computed.
type planner struct {
	in  Input
	out PlanResult
}

func (p *planner) diagnose(reason, format string, args ...any) {
	p.out.Diagnostics = append(p.out.Diagnostics, Diagnostic{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// permits applies floor(C·s/N) in integers and the below-one policy.
func (p *planner) permits() {
	c, n, pct := int64(p.in.Concurrency), int64(p.in.Divisor), int64(p.in.SafetyPercent)
	handedOut := c * pct // C·s, in hundredths of a permit
	permits := handedOut / (100 * n)
	p.out.Share = float64(handedOut) / float64(100*n)
	if permits == 0 {
		split := fmt.Sprintf("%d × %d%% = %s permits over %s is %s per pod",
			c, pct, num(float64(handedOut)/100), replicas(n), num(p.out.Share))
		switch p.in.BelowOne {
		case Strict:
			p.diagnose(ReasonQuotaTooSmall, "%s; Strict leaves every pod at 0 permits, so no call reaches the downstream; %s",
				split, wholePermitsUpTo(handedOut/100))
		case AtLeastOne:
			permits = 1
			p.diagnose(ReasonOvercommitted, "%s; AtLeastOne raised every pod to 1 permit, so the pods together hold up to %d in flight against a contract of %d: %s",
				split, n, c, overcommit(n, c, float64(handedOut)/100, pct))
		}
	}
	p.out.PerPod.Permits = int(permits)
	p.out.TotalPermits = permits * n
	p.out.PerPod.CapacityPerSecond = perSecond(permits, p.in.Latency)
}

func wholePermitsUpTo(n int64) string {
	if n == 0 {
		return "no replica count gives a pod a whole permit at this safety percentage"
	}
	return "each pod gets a whole permit only up to " + replicas(n)
}

func overcommit(total, contract int64, handedOut float64, pct int64) string {
	if total > contract {
		return fmt.Sprintf("overcommitted by %d (%s× the contract)", total-contract, num(float64(total)/float64(contract)))
	}
	return fmt.Sprintf("within the contract, but %s above the %s handed out at %d%% safety",
		num(float64(total)-handedOut), num(handedOut), pct)
}

// rate divides the contract's rate and burst.
func (p *planner) rate() {
	if p.in.RatePerSecond == 0 {
		return
	}
	n, pct := int64(p.in.Divisor), int64(p.in.SafetyPercent)
	p.out.PerPod.RatePerSecond = ratio(p.in.RatePerSecond, pct, 100*n)
	burst := int64(p.in.Burst) * pct / (100 * n)
	if burst < 1 {
		burst = 1
		p.diagnose(ReasonBurstRaisedToOne, "burst %d × %d%% over %s is %s per pod; raised to 1 so each pod's token bucket admits a call, so the pods together may burst %d against a contract burst of %d",
			p.in.Burst, pct, replicas(n), num(float64(int64(p.in.Burst)*pct)/float64(100*n)), n, p.in.Burst)
	}
	p.out.PerPod.Burst = int(burst)
}

// queue chooses the queue wait budget, the waiting room and the acquire
// timeout, and checks the worst latency against the deadline.
func (p *planner) queue() {
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
	pp.QueueCapacity = capCount(mulDivFloor(int64(pp.Permits), int64(wait), int64(w)))
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

// workers sizes the dispatcher by Little's law, capped by the permits.
func (p *planner) workers() {
	pp := &p.out.PerPod
	pp.Workers = pp.Permits
	if p.in.DemandPerSecond > 0 {
		need := ceilRatio(p.in.DemandPerSecond, int64(p.in.Latency), nanosPerSecond*int64(p.in.Divisor), MaxCount)
		p.out.DemandWorkers = int(need)
		pp.Workers = min(pp.Permits, int(need))
	}
}

// demand compares λ·W and λ·Wmax with the in-flight calls available.
func (p *planner) demand() {
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

	holds := fmt.Sprintf("%d permits × %s", p.out.PerPod.Permits, replicas(int64(p.in.Divisor)))
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
func (p *planner) rateAgainstConcurrency() {
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

// retries divides the retry budget and notes retries that cannot happen.
func (p *planner) retries() {
	p.out.PerPod.RetryBudgetPerSecond = p.in.RetryBudgetPerSecond / float64(p.in.Divisor)
	if p.in.MaxRetries > 0 && p.in.RetryBudgetPerSecond == 0 {
		p.diagnose(ReasonRetriesWithoutBudget, "max retries %d with a retry budget of 0/s: retries are spent only from the budget, so no call will be retried",
			p.in.MaxRetries)
	}
}
