package sizing

import (
	"fmt"
	"math"
	"time"
)

// Limits of the inputs. They keep every intermediate value exact or finite,
// and every count representable in the API's int32 fields.
const (
	// MaxCount is the largest count an input may give and a result may hold:
	// concurrency, burst, divisor, workers, queue capacity, retries.
	MaxCount = math.MaxInt32
	// MaxRate is the largest rate, in calls per second, an input may give.
	MaxRate = 1e12
	// MaxSweep is the largest number of divisors one Sweep covers.
	MaxSweep = 10000
)

// BelowOnePolicy says what a pod's permits become when the contract divided
// over the divisor is less than one permit.
type BelowOnePolicy int

const (
	// Strict gives such pods 0 permits, so the contract holds, and reports
	// ReasonQuotaTooSmall. It is the zero value.
	Strict BelowOnePolicy = iota
	// AtLeastOne gives every pod 1 permit, so each can still call the
	// downstream, and reports ReasonOvercommitted with the real total.
	AtLeastOne
)

// String returns the policy's name as the API spells it.
func (p BelowOnePolicy) String() string {
	switch p {
	case Strict:
		return "Strict"
	case AtLeastOne:
		return "AtLeastOne"
	default:
		return fmt.Sprintf("BelowOnePolicy(%d)", int(p))
	}
}

// Input is everything the pods' shares are sized from. Optional values are
// zero (or nil) when unknown.
type Input struct {
	// Concurrency is the contract's global in-flight limit C (1..MaxCount).
	Concurrency int
	// RatePerSecond is the contract's global rate R (0 = none, at most MaxRate).
	RatePerSecond float64
	// Burst is the contract's global burst B above the rate (0..MaxCount); it
	// requires a rate.
	Burst int
	// SafetyPercent is the part of the contract handed out, s (1..100). It is
	// a whole percentage so that permits are computed in integers.
	SafetyPercent int
	// Divisor is the replica count N the contract is divided by (1..MaxCount).
	Divisor int
	// Latency is the typical latency W (> 0).
	Latency time.Duration
	// WorstLatency is the worst-case latency Wmax (0 = unknown, else ≥ Latency).
	WorstLatency time.Duration
	// Deadline is the per-hop deadline D, queue wait included (> 0).
	Deadline time.Duration
	// MaxQueueWait is the longest a call may wait in the waiting room (≥ 0);
	// nil derives it from the deadline.
	MaxQueueWait *time.Duration
	// AcquireTimeout is the longest a caller waits for a permit (≥ 0); nil
	// means the queue wait budget.
	AcquireTimeout *time.Duration
	// DemandPerSecond is the expected total demand λ over all pods
	// (0 = unknown, at most MaxRate).
	DemandPerSecond float64
	// MaxRetries is the most retries of one call (0..MaxCount).
	MaxRetries int
	// RetryBudgetPerSecond is the global retry budget (0..MaxRate).
	RetryBudgetPerSecond float64
	// BelowOne is the policy for shares below one permit.
	BelowOne BelowOnePolicy
	// ClusterConcurrency is the part C' of Concurrency this cluster may use
	// when callers in other clusters share the contract (0 = all of it, at
	// most Concurrency). The rate and burst scale by C'/C.
	ClusterConcurrency int
	// Part, when set, is this caller's part of a shared contract, already
	// after safety and cluster share (so at most floor(C'·s) permits): Size
	// divides it over Divisor instead of the contract (which then serves
	// only the diagnostics).
	Part *Part
}

// Part is a caller's part of a shared contract.
type Part struct {
	// Permits is the caller's usable permits (0..MaxCount).
	Permits int
	// RatePerSecond is the caller's usable rate (0 = none, at most MaxRate).
	RatePerSecond float64
	// Burst is the caller's usable burst (0..MaxCount).
	Burst int
	// RetryBudgetPerSecond is the caller's retry budget (0..MaxRate).
	RetryBudgetPerSecond float64
}

// clusterConcurrency returns C', the concurrency this cluster may use.
func (in Input) clusterConcurrency() int {
	if in.ClusterConcurrency > 0 {
		return in.ClusterConcurrency
	}
	return in.Concurrency
}

// InputError reports an input that no shares can be sized from. Input is
// the name of the offending field of Input, Pool, RetryLoad, BacklogInput or
// of a Sweep bound.
type InputError struct {
	// Input names the field, as spelled in Go (for example "Concurrency").
	Input string
	// Problem says what is wrong, with the value given.
	Problem string
}

// Error returns "sizing: <Input> <Problem>".
func (e *InputError) Error() string {
	return "sizing: " + e.Input + " " + e.Problem
}

func inputErr(input, format string, args ...any) error {
	return &InputError{Input: input, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first input that Size would reject.
func (in Input) Validate() error {
	if err := countIn("Concurrency", in.Concurrency, 1); err != nil {
		return err
	}
	if err := rateIn("RatePerSecond", in.RatePerSecond); err != nil {
		return err
	}
	if err := countIn("Burst", in.Burst, 0); err != nil {
		return err
	}
	if in.Burst > 0 && in.RatePerSecond == 0 {
		return inputErr("Burst", "requires a rate greater than 0, got %d with no rate", in.Burst)
	}
	if in.SafetyPercent < 1 || in.SafetyPercent > 100 {
		return inputErr("SafetyPercent", "must be between 1 and 100, got %d", in.SafetyPercent)
	}
	if err := countIn("Divisor", in.Divisor, 1); err != nil {
		return err
	}
	if in.Latency <= 0 {
		return inputErr("Latency", "must be greater than 0, got %s", in.Latency)
	}
	if in.WorstLatency != 0 && in.WorstLatency < in.Latency {
		return inputErr("WorstLatency", "must not be below the typical latency %s, got %s", in.Latency, in.WorstLatency)
	}
	if in.Deadline <= 0 {
		return inputErr("Deadline", "must be greater than 0, got %s", in.Deadline)
	}
	if in.MaxQueueWait != nil && *in.MaxQueueWait < 0 {
		return inputErr("MaxQueueWait", "must not be negative, got %s", *in.MaxQueueWait)
	}
	if in.AcquireTimeout != nil && *in.AcquireTimeout < 0 {
		return inputErr("AcquireTimeout", "must not be negative, got %s", *in.AcquireTimeout)
	}
	if err := rateIn("DemandPerSecond", in.DemandPerSecond); err != nil {
		return err
	}
	if err := countIn("MaxRetries", in.MaxRetries, 0); err != nil {
		return err
	}
	if err := rateIn("RetryBudgetPerSecond", in.RetryBudgetPerSecond); err != nil {
		return err
	}
	if in.BelowOne != Strict && in.BelowOne != AtLeastOne {
		return inputErr("BelowOne", "must be Strict or AtLeastOne, got %s", in.BelowOne)
	}
	if in.ClusterConcurrency < 0 || in.ClusterConcurrency > in.Concurrency {
		return inputErr("ClusterConcurrency", "must be between 0 and the concurrency %d, got %d", in.Concurrency, in.ClusterConcurrency)
	}
	if pt := in.Part; pt != nil {
		if err := countIn("Part.Permits", pt.Permits, 0); err != nil {
			return err
		}
		// A part is of the usable permits; it cannot be more than all of them.
		if usable := int64(in.clusterConcurrency()) * int64(in.SafetyPercent) / 100; int64(pt.Permits) > usable {
			return inputErr("Part.Permits", "must not exceed the contract's usable %d permits, got %d", usable, pt.Permits)
		}
		if err := rateIn("Part.RatePerSecond", pt.RatePerSecond); err != nil {
			return err
		}
		if err := countIn("Part.Burst", pt.Burst, 0); err != nil {
			return err
		}
		if pt.Burst > 0 && pt.RatePerSecond == 0 {
			return inputErr("Part.Burst", "requires a rate greater than 0, got %d with no rate", pt.Burst)
		}
		if err := rateIn("Part.RetryBudgetPerSecond", pt.RetryBudgetPerSecond); err != nil {
			return err
		}
	}
	return nil
}

func countIn(input string, v, lowest int) error {
	if v < lowest {
		return inputErr(input, "must be at least %d, got %d", lowest, v)
	}
	if v > MaxCount {
		return inputErr(input, "must be at most %d, got %d", MaxCount, v)
	}
	return nil
}

// rateIn accepts a finite rate in [0, MaxRate].
func rateIn(input string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return inputErr(input, "must be a finite number, got %g", v)
	case v < 0:
		return inputErr(input, "must not be negative, got %g", v)
	case v > MaxRate:
		return inputErr(input, "must be at most %g, got %g", float64(MaxRate), v)
	}
	return nil
}

// positiveRateIn accepts a finite rate in (0, MaxRate].
func positiveRateIn(input string, v float64) error {
	if err := rateIn(input, v); err != nil {
		return err
	}
	if v == 0 {
		return inputErr(input, "must be greater than 0, got 0")
	}
	return nil
}
