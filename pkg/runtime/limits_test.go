package runtime_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

func TestGateLimits(t *testing.T) {
	base := plan.Document{Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "e", Revision: 1}
	with := func(f func(*plan.Document)) plan.Document {
		d := base
		f(&d)
		return d
	}
	tests := []struct {
		name string
		doc  plan.Document
		want gate.Limits
	}{{
		name: "the design's example",
		doc: with(func(d *plan.Document) {
			d.Permits, d.QueueCapacity, d.MaxQueueWaitSeconds, d.AcquireTimeoutSeconds = 5, 9, 0.1, 0.1
			d.LatencySeconds, d.DeadlineSeconds, d.Workers, d.RetryBudgetPerSecond = 0.22, 2, 5, 1.25
		}),
		want: gate.Limits{Permits: 5, QueueCapacity: 9, MaxQueueWait: 100 * time.Millisecond,
			AcquireTimeout: 100 * time.Millisecond, TypicalLatency: 220 * time.Millisecond},
	}, {
		name: "rate and burst",
		doc:  with(func(d *plan.Document) { d.Permits, d.RatePerSecond, d.Burst = 3, 12.5, 4 }),
		want: gate.Limits{Permits: 3, RatePerSecond: 12.5, Burst: 4},
	}, {
		name: "zero permits admit nobody",
		doc:  base,
		want: gate.Limits{},
	}, {
		name: "no latency turns the deadline check off",
		doc:  with(func(d *plan.Document) { d.Permits, d.DeadlineSeconds = 1, 2 }),
		want: gate.Limits{Permits: 1},
	}, {
		name: "the plan's largest share is one a gate holds",
		doc: with(func(d *plan.Document) {
			d.Permits, d.RatePerSecond, d.Burst, d.QueueCapacity = plan.MaxPermits, plan.MaxPerSecond, plan.MaxBurst, plan.MaxQueueCapacity
			d.MaxQueueWaitSeconds, d.AcquireTimeoutSeconds, d.LatencySeconds = plan.MaxSeconds, plan.MaxSeconds, plan.MaxSeconds
		}),
		want: gate.Limits{Permits: gate.MaxPermits, RatePerSecond: plan.MaxPerSecond, Burst: plan.MaxBurst, QueueCapacity: plan.MaxQueueCapacity,
			MaxQueueWait: time.Hour, AcquireTimeout: time.Hour, TypicalLatency: time.Hour},
	}, {
		name: "sub-millisecond durations",
		doc:  with(func(d *plan.Document) { d.MaxQueueWaitSeconds, d.LatencySeconds = 0.0005, 0.000001 }),
		want: gate.Limits{MaxQueueWait: 500 * time.Microsecond, TypicalLatency: time.Microsecond},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := plan.Validate(tt.doc); err != nil {
				t.Fatalf("test document is invalid: %v", err)
			}
			got := runtime.GateLimits(tt.doc)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GateLimits (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("a gate refuses the limits: %v", err)
			}
		})
	}
}

func TestDispatchLimits(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		queue   int
		want    dispatch.Limits
	}{
		{"workers and queue", 5, 9, dispatch.Limits{Workers: 5, QueueCapacity: 9}},
		{"no queue", 3, 0, dispatch.Limits{Workers: 3}},
		{"nothing", 0, 0, dispatch.Limits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := plan.Document{Version: plan.CurrentVersion, Gate: "g", Workers: tt.workers, QueueCapacity: tt.queue}
			if diff := cmp.Diff(tt.want, runtime.DispatchLimits(d)); diff != "" {
				t.Errorf("DispatchLimits (-want +got):\n%s", diff)
			}
		})
	}
}
