package backpressure_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
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
			got := backpressure.GateLimits(tt.doc)
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
			if diff := cmp.Diff(tt.want, backpressure.DispatchLimits(d)); diff != "" {
				t.Errorf("DispatchLimits (-want +got):\n%s", diff)
			}
		})
	}
}

// Every number of the plan model reaches what a pod enforces: changing any
// field of the table changes the gate's or the dispatcher's limits, except
// the two that are not limits of either (the retry budget sets the retry
// budget's rate; the deadline is the caller's, for its contexts).
func TestEveryPlanFieldIsEnforced(t *testing.T) {
	notALimit := map[string]bool{"retryBudgetPerSecond": true, "deadlineSeconds": true}
	base := plan.Document{Version: plan.CurrentVersion, Gate: "g", Epoch: "e", Revision: 1,
		Permits: 4, RatePerSecond: 2, Burst: 2, QueueCapacity: 3, Workers: 2, RetryBudgetPerSecond: 1,
		MaxQueueWaitSeconds: 0.2, AcquireTimeoutSeconds: 0.1, LatencySeconds: 0.05, DeadlineSeconds: 1}
	raw, err := plan.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range plan.Fields() {
		// One more of the field (a tenth of a second for a duration),
		// through the wire form, so that the test names fields by key.
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		step := 1.0
		if f.Unit == plan.UnitSeconds {
			step = 0.1
		}
		m[f.Key] = m[f.Key].(float64) + step
		changed, _ := json.Marshal(m)
		d, err := plan.Parse(changed)
		if err != nil {
			t.Fatalf("%s + %v: %v", f.Key, step, err)
		}
		same := cmp.Equal(backpressure.GateLimits(d), backpressure.GateLimits(base)) && backpressure.DispatchLimits(d) == backpressure.DispatchLimits(base)
		if same != notALimit[f.Key] {
			t.Errorf("%s changed from %v: gate or dispatcher limits changed = %v, want %v", f.Key, m[f.Key], !same, !notALimit[f.Key])
		}
	}
}
