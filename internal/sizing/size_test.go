package sizing

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// approx compares floats to nine significant digits: the expectations below
// are worked out by hand and written as fractions.
var approx = cmpopts.EquateApprox(1e-9, 0)

func dur(d time.Duration) *time.Duration { return &d }

// designExample is the search gateway of docs/concepts.md ("The problem"):
// a global contract of 50 in flight over 8 pods, demand 1900/s at 220 ms.
func designExample() Input {
	return Input{
		Concurrency:          50,
		SafetyPercent:        80,
		Divisor:              8,
		Latency:              220 * time.Millisecond,
		WorstLatency:         1800 * time.Millisecond,
		Deadline:             2 * time.Second,
		MaxQueueWait:         dur(100 * time.Millisecond),
		AcquireTimeout:       dur(200 * time.Millisecond),
		DemandPerSecond:      1900,
		MaxRetries:           1,
		RetryBudgetPerSecond: 10,
	}
}

// sampleQuota is config/samples' quota: the same contract with a 300 ms
// deadline and no max queue wait.
func sampleQuota() Input {
	return Input{
		Concurrency:   50,
		SafetyPercent: 80,
		Divisor:       8,
		Latency:       220 * time.Millisecond,
		WorstLatency:  1800 * time.Millisecond,
		Deadline:      300 * time.Millisecond,
	}
}

func with(in Input, change func(*Input)) Input {
	change(&in)
	return in
}

func TestSize(t *testing.T) {
	tests := []struct {
		name string
		in   Input
		want Result
	}{{
		// permits = floor(50·0.8/8) = 5; μ = 5/0.22 s = 22.73/s;
		// queue = floor(22.73 × 0.1) = 2; acquire = min(200ms, 100ms);
		// workers = min(5, ceil(1900/8 × 0.22)) = min(5, 53);
		// L = 1900 × 0.22 = 418 against 5 × 8 = 40; ceiling 40/0.22 = 181.8/s;
		// shed = 1 − 40/418 = 90.4%. 100ms + 1.8s fits 2s.
		name: "design example",
		in:   designExample(),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:              5,
					QueueCapacity:        2,
					Workers:              5,
					RetryBudgetPerSecond: 1.25,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      100 * time.Millisecond,
				AcquireTimeout:    100 * time.Millisecond,
			},
			Usable:                     40,
			Base:                       5,
			Share:                      5,
			TotalPermits:               40,
			QueueWaitRule:              QueueWaitGiven,
			DemandWorkers:              53,
			UsableRetryBudgetPerSecond: 10,
			Latency:                    220 * time.Millisecond,
			Demand: &Demand{
				InFlight:                418,
				WorstInFlight:           3420,
				Available:               40,
				GoodputCeilingPerSecond: 40 / 0.22,
				ShedFraction:            1 - 40.0/418,
				WorstShedFraction:       1 - 40.0/3420,
			},
			Diagnostics: []Diagnostic{{
				Reason:  ReasonDemandExceedsQuota,
				Message: "demand 1900/s × typical latency 220ms = 418 calls in flight against 40 available (5 permits × 8 replicas): goodput ceiling 40 / 220ms = 181.82/s, so 90.4% of the demand will be shed; at worst latency 1.8s it needs 3420 in flight and 98.8% is shed",
			}},
		},
	}, {
		// Qw = (300ms − 220ms)/2 = 40ms; queue = floor(5 × 40/220) = 0.
		name: "sample quota",
		in:   sampleQuota(),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 5,
					Workers: 5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Base:          5,
			Share:         5,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonWorstLatencyExceedsDeadline,
				Message: "worst latency 1.8s exceeds the deadline 300ms: calls at worst latency miss it even without queueing",
			}},
		},
	}, {
		// 40 = 5 × 7 + 5: five pods hold 6 permits, two hold 5. The pod at 6
		// has a waiting room of floor(6 × 40/220) = 1.
		name: "exact division: 40 over 7 replicas",
		in:   with(sampleQuota(), func(in *Input) { in.Divisor = 7; in.WorstLatency = 0 }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 5,
					Workers: 5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits:       6,
					QueueCapacity: 1,
					Workers:       6,
				},
				CapacityPerSecond: 6 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Base:          5,
			Extra:         5,
			Share:         40.0 / 7,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
		},
	}, {
		// 40 permits over 100 pods: 40 pods hold 1, 60 hold none. The 40
		// permits in use cover the demand's 2.2 in flight.
		name: "below one, Strict",
		in:   with(sampleQuota(), func(in *Input) { in.Divisor = 100; in.WorstLatency = 0; in.DemandPerSecond = 10 }),
		want: Result{
			PerPod: PerPod{
				PodShare:       plan.PodShare{},
				MaxQueueWait:   40 * time.Millisecond,
				AcquireTimeout: 40 * time.Millisecond,
			},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits: 1,
					Workers: 1,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Extra:         40,
			Share:         0.4,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitDerived,
			DemandWorkers: 1,
			Demand:        &Demand{InFlight: 2.2, Available: 40, GoodputCeilingPerSecond: 40 / 0.22},
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQuotaTooSmall,
				Message: "50 × 80% = 40 permits over 100 replicas is 0.4 per pod; Strict gives 40 of the pods 1 permit each and leaves the other 60 at 0, so they shed every call; each pod gets a whole permit only up to 40 replicas",
			}},
		},
	}, {
		// The same with a rate: 80/s and a burst of 16 over 40 permits give
		// a pod holding 1 permit a burst of floor(16/40) = 0, raised to 1.
		name: "below one, Strict, burst raised to one",
		in: with(sampleQuota(), func(in *Input) {
			in.Divisor = 100
			in.WorstLatency = 0
			in.RatePerSecond = 100
			in.Burst = 20
		}),
		want: Result{
			PerPod: PerPod{
				PodShare:       plan.PodShare{},
				MaxQueueWait:   40 * time.Millisecond,
				AcquireTimeout: 40 * time.Millisecond,
			},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits:       1,
					RatePerSecond: 2,
					Burst:         1,
					Workers:       1,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:              40,
			Extra:               40,
			Share:               0.4,
			TotalPermits:        40,
			QueueWaitRule:       QueueWaitDerived,
			UsableRatePerSecond: 80,
			UsableBurst:         16,
			Latency:             220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQuotaTooSmall,
				Message: "50 × 80% = 40 permits over 100 replicas is 0.4 per pod; Strict gives 40 of the pods 1 permit each and leaves the other 60 at 0, so they shed every call; each pod gets a whole permit only up to 40 replicas",
			}, {
				Reason:  ReasonBurstRaisedToOne,
				Message: "usable burst 16 × 1 of 40 permits is 0.4 for a pod holding 1 permit; raised to 1 so each pod's token bucket admits a call, so the pods together may burst 40 against a usable burst of 16",
			}},
		},
	}, {
		name: "below one, AtLeastOne beyond the contract",
		in:   with(sampleQuota(), func(in *Input) { in.Divisor = 100; in.WorstLatency = 0; in.BelowOne = AtLeastOne }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 1,
					Workers: 1,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Base:          1,
			Share:         0.4,
			TotalPermits:  100,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonOvercommitted,
				Message: "50 × 80% = 40 permits over 100 replicas is 0.4 per pod; AtLeastOne raised every pod to 1 permit, so the pods together hold up to 100 in flight against a contract of 50: overcommitted by 50 (2× the contract)",
			}},
		},
	}, {
		name: "below one, AtLeastOne within the contract",
		in:   with(sampleQuota(), func(in *Input) { in.Divisor = 45; in.WorstLatency = 0; in.BelowOne = AtLeastOne }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 1,
					Workers: 1,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Base:          1,
			Share:         40.0 / 45,
			TotalPermits:  45,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonOvercommitted,
				Message: "50 × 80% = 40 permits over 45 replicas is 0.88 per pod; AtLeastOne raised every pod to 1 permit, so the pods together hold up to 45 in flight against a contract of 50: within the contract, but 5 above the 40 handed out at 80% safety",
			}},
		},
	}, {
		name: "safety percentage that rounds every replica count to zero",
		in:   Input{Concurrency: 1, SafetyPercent: 50, Divisor: 1, Latency: time.Second, Deadline: 3 * time.Second},
		want: Result{
			PerPod:        PerPod{MaxQueueWait: time.Second, AcquireTimeout: time.Second},
			QueueWaitRule: QueueWaitDerived,
			Latency:       time.Second,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQuotaTooSmall,
				Message: "floor(1 × 50%) = 0 permits over 1 replica is 0 per pod; Strict leaves every pod at 0 permits, so no call reaches the downstream",
			}},
		},
	}, {
		name: "deadline below typical latency",
		in: with(sampleQuota(), func(in *Input) {
			in.Deadline = 200 * time.Millisecond
			in.AcquireTimeout = dur(100 * time.Millisecond)
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 5,
					Workers: 5,
				},
				CapacityPerSecond: 5 / 0.22,
			},
			Usable:        40,
			Base:          5,
			Share:         5,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitNone,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonDeadlineBelowLatency,
				Message: "deadline 200ms − typical latency 220ms = -20ms leaves no time to queue: max queue wait and queue capacity are 0",
			}},
		},
	}, {
		// 100ms + 220ms > 300ms: Qw = 80ms; queue = floor(5 × 80/220) = 1.
		name: "max queue wait clamped to the deadline",
		in: with(sampleQuota(), func(in *Input) {
			in.WorstLatency = 250 * time.Millisecond
			in.MaxQueueWait = dur(100 * time.Millisecond)
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       5,
					QueueCapacity: 1,
					Workers:       5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      80 * time.Millisecond,
				AcquireTimeout:    80 * time.Millisecond,
			},
			Usable:        40,
			Base:          5,
			Share:         5,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitClamped,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQueueWaitClamped,
				Message: "max queue wait 100ms + typical latency 220ms = 320ms exceeds the deadline 300ms: queue wait budget lowered to 300ms − 220ms = 80ms",
			}, {
				Reason:  ReasonWorstLatencyExceedsDeadline,
				Message: "queue wait 80ms + worst latency 250ms = 330ms exceeds the deadline 300ms: calls that queue and then meet the worst latency miss it",
			}},
		},
	}, {
		// usable rate 100 × 80% = 80/s, burst floor(20 × 80%) = 16; a pod at
		// 5 of 40 permits gets 10/s and floor(16 × 5/40) = 2;
		// R·W = 22 fits 50, R·Wmax = 180 does not.
		name: "rate and burst",
		in: with(sampleQuota(), func(in *Input) {
			in.RatePerSecond = 100
			in.Burst = 20
			in.Deadline = 2 * time.Second
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       5,
					RatePerSecond: 10,
					Burst:         2,
					QueueCapacity: 20, // floor(5 × 890/220)
					Workers:       5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      890 * time.Millisecond,
				AcquireTimeout:    890 * time.Millisecond,
			},
			Usable:              40,
			Base:                5,
			Share:               5,
			TotalPermits:        40,
			QueueWaitRule:       QueueWaitDerived,
			UsableRatePerSecond: 80,
			UsableBurst:         16,
			Latency:             220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonWorstLatencyExceedsDeadline,
				Message: "queue wait 890ms + worst latency 1.8s = 2.69s exceeds the deadline 2s: calls that queue and then meet the worst latency miss it",
			}, {
				Reason:  ReasonRateAllowsExcessInFlight,
				Message: "rate 100/s × worst latency 1.8s = 180 calls in flight, above the concurrency 50: when latency rises the rate limit alone does not bound in-flight calls; the permits do",
			}},
		},
	}, {
		name: "burst share below one",
		in: with(sampleQuota(), func(in *Input) {
			in.RatePerSecond = 1000
			in.Burst = 4
			in.WorstLatency = 0
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       5,
					RatePerSecond: 100,
					Burst:         1,
					Workers:       5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:              40,
			Base:                5,
			Share:               5,
			TotalPermits:        40,
			QueueWaitRule:       QueueWaitDerived,
			UsableRatePerSecond: 800,
			UsableBurst:         3,
			Latency:             220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonBurstRaisedToOne,
				Message: "usable burst 3 × 5 of 40 permits is 0.38 for a pod holding 5 permits; raised to 1 so each pod's token bucket admits a call, so the pods together may burst 8 against a usable burst of 3",
			}, {
				Reason:  ReasonRateAllowsExcessInFlight,
				Message: "rate 1000/s × typical latency 220ms = 220 calls in flight, above the concurrency 50: the rate limit alone does not bound in-flight calls; the permits do",
			}},
		},
	}, {
		// In floating point 100 × 0.07 is 7.000000000000001, and its ceiling 8;
		// Little's law asks for exactly 7 workers.
		name: "workers from demand, exact",
		in: Input{
			Concurrency: 50, SafetyPercent: 100, Divisor: 1,
			Latency: 70 * time.Millisecond, Deadline: time.Second,
			DemandPerSecond: 100,
		},
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       50,
					QueueCapacity: 332, // floor(50 × 465/70)
					Workers:       7,
				},
				CapacityPerSecond: 50 / 0.07,
				MaxQueueWait:      465 * time.Millisecond,
				AcquireTimeout:    465 * time.Millisecond,
			},
			Usable:        50,
			Base:          50,
			Share:         50,
			TotalPermits:  50,
			QueueWaitRule: QueueWaitDerived,
			DemandWorkers: 7,
			Latency:       70 * time.Millisecond,
			Demand: &Demand{
				InFlight:                7,
				Available:               50,
				GoodputCeilingPerSecond: 50 / 0.07,
			},
		},
	}, {
		// 100/s × 220ms = 22 fits 40; 100/s × 1.8s = 180 does not:
		// shed 1 − 40/180 = 77.8%, ceiling 40/1.8s = 22.22/s.
		name: "demand fits at typical latency only",
		in:   with(designExample(), func(in *Input) { in.DemandPerSecond = 100 }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:              5,
					QueueCapacity:        2,
					Workers:              3, // ceil(100/8 × 0.22) = ceil(2.75)
					RetryBudgetPerSecond: 1.25,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      100 * time.Millisecond,
				AcquireTimeout:    100 * time.Millisecond,
			},
			Usable:                     40,
			Base:                       5,
			Share:                      5,
			TotalPermits:               40,
			QueueWaitRule:              QueueWaitGiven,
			DemandWorkers:              3,
			UsableRetryBudgetPerSecond: 10,
			Latency:                    220 * time.Millisecond,
			Demand: &Demand{
				InFlight:                22,
				WorstInFlight:           180,
				Available:               40,
				GoodputCeilingPerSecond: 40 / 0.22,
				WorstShedFraction:       1 - 40.0/180,
			},
			Diagnostics: []Diagnostic{{
				Reason:  ReasonDemandExceedsQuotaAtWorstLatency,
				Message: "demand 100/s × worst latency 1.8s = 180 calls in flight against 40 available (5 permits × 8 replicas): at worst latency the goodput ceiling is 40 / 1.8s = 22.22/s, so 77.8% of the demand will be shed",
			}},
		},
	}, {
		name: "retries without a budget",
		in:   with(sampleQuota(), func(in *Input) { in.WorstLatency = 0; in.MaxRetries = 2 }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits: 5,
					Workers: 5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        40,
			Base:          5,
			Share:         5,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonRetriesWithoutBudget,
				Message: "max retries 2 with a retry budget of 0/s: retries are spent only from the budget, so no call will be retried",
			}},
		},
	}, {
		// 5 × 44ms / 220ms is exactly 1; in floating point it is 0.9999999999999999.
		name: "queue capacity, exact",
		in:   with(sampleQuota(), func(in *Input) { in.WorstLatency = 0; in.MaxQueueWait = dur(44 * time.Millisecond) }),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       5,
					QueueCapacity: 1,
					Workers:       5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      44 * time.Millisecond,
				AcquireTimeout:    44 * time.Millisecond,
			},
			Usable:        40,
			Base:          5,
			Share:         5,
			TotalPermits:  40,
			QueueWaitRule: QueueWaitGiven,
			Latency:       220 * time.Millisecond,
		},
	}, {
		// This cluster uses 20 of the 50: A = 20 × 80% = 16 = 5·3 + 1; the
		// rate and burst scale by 20/50 too: 100 × 16/50 = 32/s, burst
		// floor(20 × 16/50) = 6. A pod at 5 of 16 permits gets 10/s and
		// floor(6 × 5/16) = 1; at 6, 12/s and floor(36/16) = 2.
		name: "cluster share",
		in: with(sampleQuota(), func(in *Input) {
			in.ClusterConcurrency = 20
			in.Divisor = 3
			in.WorstLatency = 0
			in.RatePerSecond = 100
			in.Burst = 20
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:       5,
					RatePerSecond: 10,
					Burst:         1,
					Workers:       5,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits:       6,
					RatePerSecond: 12,
					Burst:         2,
					QueueCapacity: 1,
					Workers:       6,
				},
				CapacityPerSecond: 6 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:              16,
			Base:                5,
			Extra:               1,
			Share:               16.0 / 3,
			TotalPermits:        16,
			QueueWaitRule:       QueueWaitDerived,
			UsableRatePerSecond: 32,
			UsableBurst:         6,
			Latency:             220 * time.Millisecond,
		},
	}, {
		// Too small for this cluster's share: floor(3 × 80%) = 2 permits
		// over 4 pods.
		name: "cluster share below one",
		in: with(sampleQuota(), func(in *Input) {
			in.ClusterConcurrency = 3
			in.Divisor = 4
			in.WorstLatency = 0
		}),
		want: Result{
			PerPod: PerPod{MaxQueueWait: 40 * time.Millisecond, AcquireTimeout: 40 * time.Millisecond},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits: 1,
					Workers: 1,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:        2,
			Extra:         2,
			Share:         0.5,
			TotalPermits:  2,
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQuotaTooSmall,
				Message: "floor(3 of 50 for this cluster × 80%) = 2 permits over 4 replicas is 0.5 per pod; Strict gives 2 of the pods 1 permit each and leaves the other 2 at 0, so they shed every call; each pod gets a whole permit only up to 2 replicas",
			}},
		},
	}, {
		// A caller's part of a shared contract: 21 permits, 30/s, burst 5,
		// retry budget 6/s over 4 pods: 5·4 + 1. A pod at 5 of 21 permits
		// gets 30 × 5/21/s, burst max(1, floor(25/21)) = 1, 6 × 5/21 retries;
		// at 6, 30 × 6/21/s, floor(30/21) = 1, 6 × 6/21.
		name: "caller's part of a shared contract",
		in: with(designExample(), func(in *Input) {
			in.Divisor = 4
			in.DemandPerSecond = 0
			in.RatePerSecond = 100
			in.Burst = 20
			in.Part = &Part{Permits: 21, RatePerSecond: 30, Burst: 5, RetryBudgetPerSecond: 6}
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:              5,
					RatePerSecond:        30.0 * 5 / 21,
					Burst:                1,
					QueueCapacity:        2,
					Workers:              5,
					RetryBudgetPerSecond: 6.0 * 5 / 21,
				},
				CapacityPerSecond: 5 / 0.22,
				MaxQueueWait:      100 * time.Millisecond,
				AcquireTimeout:    100 * time.Millisecond,
			},
			PerPodExtra: &PerPod{
				PodShare: plan.PodShare{
					Permits:              6,
					RatePerSecond:        30.0 * 6 / 21,
					Burst:                1,
					QueueCapacity:        2,
					Workers:              6,
					RetryBudgetPerSecond: 6.0 * 6 / 21,
				},
				CapacityPerSecond: 6 / 0.22,
				MaxQueueWait:      100 * time.Millisecond,
				AcquireTimeout:    100 * time.Millisecond,
			},
			Usable:                     21,
			Base:                       5,
			Extra:                      1,
			Share:                      21.0 / 4,
			TotalPermits:               21,
			QueueWaitRule:              QueueWaitGiven,
			UsableRatePerSecond:        30,
			UsableBurst:                5,
			UsableRetryBudgetPerSecond: 6,
			Latency:                    220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonRateAllowsExcessInFlight,
				Message: "rate 100/s × worst latency 1.8s = 180 calls in flight, above the concurrency 50: when latency rises the rate limit alone does not bound in-flight calls; the permits do",
			}},
		},
	}, {
		name: "caller's part of 0 permits",
		in: with(sampleQuota(), func(in *Input) {
			in.WorstLatency = 0
			in.Part = &Part{}
		}),
		want: Result{
			PerPod:        PerPod{MaxQueueWait: 40 * time.Millisecond, AcquireTimeout: 40 * time.Millisecond},
			QueueWaitRule: QueueWaitDerived,
			Latency:       220 * time.Millisecond,
			Diagnostics: []Diagnostic{{
				Reason:  ReasonQuotaTooSmall,
				Message: "this caller's part of 0 permits over 8 replicas is 0 per pod; Strict leaves every pod at 0 permits, so no call reaches the downstream",
			}},
		},
	}, {
		// The retry budget of a caller's part is what its pods spend: the
		// contract's own budget (here 0) does not matter.
		name: "caller's part with a retry budget",
		in: with(sampleQuota(), func(in *Input) {
			in.WorstLatency = 0
			in.MaxRetries = 2
			in.Part = &Part{Permits: 8, RetryBudgetPerSecond: 4}
		}),
		want: Result{
			PerPod: PerPod{
				PodShare: plan.PodShare{
					Permits:              1,
					Workers:              1,
					RetryBudgetPerSecond: 0.5,
				},
				CapacityPerSecond: 1 / 0.22,
				MaxQueueWait:      40 * time.Millisecond,
				AcquireTimeout:    40 * time.Millisecond,
			},
			Usable:                     8,
			Base:                       1,
			Share:                      1,
			TotalPermits:               8,
			QueueWaitRule:              QueueWaitDerived,
			UsableRetryBudgetPerSecond: 4,
			Latency:                    220 * time.Millisecond,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Size(tt.in)
			if err != nil {
				t.Fatalf("Size() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got, approx); diff != "" {
				t.Errorf("Size() mismatch (-want +got):\n%s", diff)
			}
			checkSize(t, tt.in, got)
		})
	}
}

func TestSizeRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		input  string
		change func(*Input)
	}{
		{"Concurrency", func(in *Input) { in.Concurrency = 0 }},
		{"Concurrency", func(in *Input) { in.Concurrency = MaxCount + 1 }},
		{"RatePerSecond", func(in *Input) { in.RatePerSecond = -1 }},
		{"RatePerSecond", func(in *Input) { in.RatePerSecond = nan() }},
		{"RatePerSecond", func(in *Input) { in.RatePerSecond = 2 * MaxRate }},
		{"Burst", func(in *Input) { in.Burst = -1 }},
		{"Burst", func(in *Input) { in.Burst = 5 }},
		{"SafetyPercent", func(in *Input) { in.SafetyPercent = 0 }},
		{"SafetyPercent", func(in *Input) { in.SafetyPercent = 101 }},
		{"Divisor", func(in *Input) { in.Divisor = 0 }},
		{"Divisor", func(in *Input) { in.Divisor = -8 }},
		{"Latency", func(in *Input) { in.Latency = 0 }},
		{"WorstLatency", func(in *Input) { in.WorstLatency = time.Millisecond }},
		{"Deadline", func(in *Input) { in.Deadline = -time.Second }},
		{"MaxQueueWait", func(in *Input) { in.MaxQueueWait = dur(-time.Millisecond) }},
		{"AcquireTimeout", func(in *Input) { in.AcquireTimeout = dur(-time.Millisecond) }},
		{"DemandPerSecond", func(in *Input) { in.DemandPerSecond = inf() }},
		{"MaxRetries", func(in *Input) { in.MaxRetries = -1 }},
		{"RetryBudgetPerSecond", func(in *Input) { in.RetryBudgetPerSecond = -0.5 }},
		{"BelowOne", func(in *Input) { in.BelowOne = 7 }},
		{"ClusterConcurrency", func(in *Input) { in.ClusterConcurrency = -1 }},
		{"ClusterConcurrency", func(in *Input) { in.ClusterConcurrency = 51 }},
		{"Part.Permits", func(in *Input) { in.Part = &Part{Permits: -1} }},
		{"Part.Permits", func(in *Input) { in.Part = &Part{Permits: 41} }},
		{"Part.Permits", func(in *Input) { in.ClusterConcurrency = 10; in.Part = &Part{Permits: 9} }},
		{"Part.RatePerSecond", func(in *Input) { in.Part = &Part{RatePerSecond: nan()} }},
		{"Part.Burst", func(in *Input) { in.Part = &Part{RatePerSecond: 1, Burst: -1} }},
		{"Part.Burst", func(in *Input) { in.Part = &Part{Burst: 2} }},
		{"Part.RetryBudgetPerSecond", func(in *Input) { in.Part = &Part{RetryBudgetPerSecond: -1} }},
	}
	for _, tt := range tests {
		in := with(designExample(), tt.change)
		got, err := Size(in)
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: Size() error = %v, want an *InputError", tt.input, err)
			continue
		}
		if ie.Input != tt.input {
			t.Errorf("Size() error names %q, want %q: %v", ie.Input, tt.input, err)
		}
		if diff := cmp.Diff(Result{}, got); diff != "" {
			t.Errorf("%s: Size() returned a result with its error (-want +got):\n%s", tt.input, diff)
		}
	}
}

func TestInputErrorMessage(t *testing.T) {
	_, err := Size(with(designExample(), func(in *Input) { in.Concurrency = 0 }))
	if got, want := err.Error(), "sizing: Concurrency must be at least 1, got 0"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

// TestShareWithReserve: the sample quota (40 usable over 8 pods, a derived
// queue wait of (300 − 220) / 2 = 40 ms) with a reserve of 8 leaves each pod
// 32 / 8 = 4 permits. Sized by its own 4 the waiting room is
// floor(4 × 40 / 220) = 0; counting the 8 reserve permits that can serve
// its waiters it is floor(12 × 40 / 220) = 2. Everything else is the
// share of 4 permits.
func TestShareWithReserve(t *testing.T) {
	res, err := Size(sampleQuota())
	if err != nil {
		t.Fatal(err)
	}
	if res.Usable != 40 || res.PerPod.MaxQueueWait != 40*time.Millisecond {
		t.Fatalf("sample: usable %d, max queue wait %s; want 40 and 40ms", res.Usable, res.PerPod.MaxQueueWait)
	}
	for _, c := range []struct {
		name             string
		permits, reserve int
		want             int
	}{
		{"reserve 8, 4 permits", 4, 8, 2},
		{"no reserve, 4 permits", 4, 0, 0},
		{"no reserve, 5 permits", 5, 0, 0},
		{"reserve 16, 3 permits", 3, 16, 3},                 // floor(19 × 40 / 220)
		{"reserve 32, 1 permit", 1, 32, 6},                  // floor(33 × 40 / 220)
		{"reserve 8, no permits", 0, 8, 0},                  // the plan gives a pod without permits no room
		{"negative reserve", 4, -3, 0},                      // taken as none
		{"reserve beyond the bound", 4, 1 << 40, 1<<20 - 1}, // plan.MaxQueueCapacity
	} {
		got := res.ShareWithReserve(c.permits, c.reserve)
		want := res.ShareFor(c.permits)
		want.QueueCapacity = c.want
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: ShareWithReserve(%d, %d) (-want +got):\n%s", c.name, c.permits, c.reserve, diff)
		}
	}
}
