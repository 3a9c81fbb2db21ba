package sizing

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name string
		pool Pool
		want PoolResult
	}{{
		// 10 workers / 50ms = 200/s; 20 queued / 200/s = 100ms; 150ms ≤ 300ms;
		// largest queue = floor(250ms × 10 / 50ms) = 50.
		name: "fine at 50ms",
		pool: Pool{Workers: 10, Queue: 20, Latency: 50 * time.Millisecond, Deadline: 300 * time.Millisecond},
		want: PoolResult{
			ThroughputPerSecond:  200,
			MaxQueueWait:         100 * time.Millisecond,
			Total:                150 * time.Millisecond,
			FitsDeadline:         true,
			LargestQueueThatFits: 50,
		},
	}, {
		// The same pool at 150ms: 66.67/s; 20 / 66.67 = 300ms; 450ms > 300ms;
		// largest = floor(150ms × 10 / 150ms) = 10.
		name: "broken at 150ms",
		pool: Pool{Workers: 10, Queue: 20, Latency: 150 * time.Millisecond, Deadline: 300 * time.Millisecond},
		want: PoolResult{
			ThroughputPerSecond:  10 / 0.15,
			MaxQueueWait:         300 * time.Millisecond,
			Total:                450 * time.Millisecond,
			LargestQueueThatFits: 10,
		},
	}, {
		name: "latency above the deadline",
		pool: Pool{Workers: 4, Queue: 0, Latency: 500 * time.Millisecond, Deadline: 300 * time.Millisecond},
		want: PoolResult{
			ThroughputPerSecond: 8,
			Total:               500 * time.Millisecond,
		},
	}, {
		// 1 × 1ns / 3 rounds up to 1ns, so a queue that fits truly fits.
		name: "wait rounded up",
		pool: Pool{Workers: 3, Queue: 1, Latency: 1, Deadline: 2},
		want: PoolResult{
			ThroughputPerSecond:  3e9,
			MaxQueueWait:         1,
			Total:                2,
			FitsDeadline:         true,
			LargestQueueThatFits: 3,
		},
	}, {
		name: "saturates instead of overflowing",
		pool: Pool{Workers: 1, Queue: MaxCount, Latency: math.MaxInt64 / 2, Deadline: time.Second},
		want: PoolResult{
			ThroughputPerSecond: perSecond(1, math.MaxInt64/2),
			MaxQueueWait:        math.MaxInt64,
			Total:               math.MaxInt64,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Evaluate(tt.pool)
			if err != nil {
				t.Fatalf("Evaluate() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got, approx); diff != "" {
				t.Errorf("Evaluate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAmplification(t *testing.T) {
	t.Run("overload with one retry", func(t *testing.T) {
		got, err := Amplification(RetryLoad{CapacityPerSecond: 100, ArrivalPerSecond: 150, MaxRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		// p0 = 1 − 100/150 = 1/3, A = 1 + 1/3, λatt = 150 × 4/3 = 200; then
		// p = 1 − 100/200 = 1/2, A = 3/2, λatt = 225.
		wantFirst := []Round{
			{Rejection: 1.0 / 3, Amplification: 4.0 / 3, AttemptRatePerSecond: 200},
			{Rejection: 0.5, Amplification: 1.5, AttemptRatePerSecond: 225},
		}
		if diff := cmp.Diff(wantFirst, got.Rounds[:2], approx); diff != "" {
			t.Errorf("first rounds mismatch (-want +got):\n%s", diff)
		}
		// Fixed point of λatt = 150·(2 − 100/λatt): λatt² − 300λatt + 15000 = 0,
		// λatt = 150 + 50√3 = 236.60, p = 1 − 100/λatt = 0.5774.
		fixed := 150 + 50*math.Sqrt(3)
		want := Round{Rejection: 1 - 100/fixed, Amplification: fixed / 150, AttemptRatePerSecond: fixed}
		if diff := cmp.Diff(want, got.FixedPoint, cmpopts.EquateApprox(1e-3, 0)); diff != "" {
			t.Errorf("fixed point mismatch (-want +got):\n%s", diff)
		}
		if !got.Converged || !got.DivergentWithoutLimit || got.SingleRound != got.Rounds[0] {
			t.Errorf("Converged %v, DivergentWithoutLimit %v, SingleRound %+v; want true, true, the first round", got.Converged, got.DivergentWithoutLimit, got.SingleRound)
		}
		if n := len(got.Rounds); n < 4 || n > 12 {
			t.Errorf("%d rounds; the error shrinks by about 0.27 a round, so 4..12 are expected", n)
		}
	})
	t.Run("within capacity", func(t *testing.T) {
		got, err := Amplification(RetryLoad{CapacityPerSecond: 100, ArrivalPerSecond: 80, MaxRetries: 3})
		if err != nil {
			t.Fatal(err)
		}
		want := AmplificationResult{
			SingleRound: Round{Amplification: 1, AttemptRatePerSecond: 80},
			FixedPoint:  Round{Amplification: 1, AttemptRatePerSecond: 80},
			Rounds:      []Round{{Amplification: 1, AttemptRatePerSecond: 80}},
			Converged:   true,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Amplification() mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("far over capacity approaches r+1", func(t *testing.T) {
		// q = 1e-20: the textbook (1 − p^(r+1))/(1 − p) is 0/0 in floating point.
		got, err := Amplification(RetryLoad{CapacityPerSecond: 1e-8, ArrivalPerSecond: 1e12, MaxRetries: 3})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Round{Rejection: 1, Amplification: 4, AttemptRatePerSecond: 4e12}, got.FixedPoint, approx); diff != "" {
			t.Errorf("fixed point mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("no retries", func(t *testing.T) {
		got, err := Amplification(RetryLoad{CapacityPerSecond: 100, ArrivalPerSecond: 400, MaxRetries: 0})
		if err != nil {
			t.Fatal(err)
		}
		want := Round{Rejection: 0.75, Amplification: 1, AttemptRatePerSecond: 400}
		if diff := cmp.Diff(want, got.FixedPoint, approx); diff != "" || len(got.Rounds) != 1 || !got.DivergentWithoutLimit {
			t.Errorf("got %+v (-want +got fixed point):\n%s", got, diff)
		}
	})
	t.Run("invalid input", func(t *testing.T) {
		for input, l := range map[string]RetryLoad{
			"CapacityPerSecond": {CapacityPerSecond: 0, ArrivalPerSecond: 1},
			"ArrivalPerSecond":  {CapacityPerSecond: 1, ArrivalPerSecond: math.Inf(1)},
			"MaxRetries":        {CapacityPerSecond: 1, ArrivalPerSecond: 1, MaxRetries: -1},
		} {
			_, err := Amplification(l)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Input != input {
				t.Errorf("Amplification(%+v) error = %v, want one naming %s", l, err, input)
			}
		}
	})
}

func TestBacklog(t *testing.T) {
	queue, buffer, target := 1000, 2*time.Second, 1900.0
	got, err := Backlog(BacklogInput{
		ArrivalPerSecond: 1900, Workers: 50, Latency: 220 * time.Millisecond,
		Queue: &queue, Buffer: &buffer, TargetPerSecond: &target,
	})
	if err != nil {
		t.Fatal(err)
	}
	// C = 50 / 0.22 = 227.27/s; growth 1900 − 227.27 = 1672.73/s;
	// 1000 / 1672.73 = 0.5978s; ceil(1672.73 × 2) = 3346;
	// ceil(1900 × 0.22) = 418 exactly (in floating point 418.00000000000006).
	consumer := 50 / 0.22
	fill := secondsToDuration(1000 / (1900 - consumer))
	want := BacklogResult{
		ConsumerPerSecond: consumer,
		GrowthPerSecond:   1900 - consumer,
		TimeToFill:        &fill,
		QueueForBuffer:    ptr(3346),
		WorkersForTarget:  ptr(418),
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("Backlog() mismatch (-want +got):\n%s", diff)
	}
	if fill.Round(time.Millisecond) != 598*time.Millisecond {
		t.Errorf("time to fill = %s, want about 598ms", fill)
	}

	t.Run("consumers keep up", func(t *testing.T) {
		got, err := Backlog(BacklogInput{ArrivalPerSecond: 100, Workers: 50, Latency: 220 * time.Millisecond, Queue: &queue, Buffer: &buffer})
		if err != nil {
			t.Fatal(err)
		}
		want := BacklogResult{ConsumerPerSecond: consumer, GrowthPerSecond: 100 - consumer, QueueForBuffer: ptr(0)}
		if diff := cmp.Diff(want, got, approx); diff != "" {
			t.Errorf("Backlog() mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("invalid input", func(t *testing.T) {
		zero, neg := 0, -time.Second
		for input, b := range map[string]BacklogInput{
			"ArrivalPerSecond": {ArrivalPerSecond: 0, Workers: 1, Latency: 1},
			"Workers":          {ArrivalPerSecond: 1, Workers: 0, Latency: 1},
			"Latency":          {ArrivalPerSecond: 1, Workers: 1},
			"Queue":            {ArrivalPerSecond: 1, Workers: 1, Latency: 1, Queue: &zero},
			"Buffer":           {ArrivalPerSecond: 1, Workers: 1, Latency: 1, Buffer: &neg},
			"TargetPerSecond":  {ArrivalPerSecond: 1, Workers: 1, Latency: 1, TargetPerSecond: new(float64)},
		} {
			_, err := Backlog(b)
			var ie *InputError
			if !errors.As(err, &ie) || ie.Input != input {
				t.Errorf("Backlog(%+v) error = %v, want one naming %s", b, err, input)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestSweep(t *testing.T) {
	in := sampleQuota()
	got, err := Sweep(in, 4, 50)
	if err != nil {
		t.Fatal(err)
	}
	// 50 × 80% = 40: a whole permit per pod up to 40 replicas.
	if got.LastWithPermit != 40 || got.FirstBelowOne != 41 || len(got.Rows) != 47 {
		t.Errorf("LastWithPermit %d, FirstBelowOne %d, %d rows; want 40, 41, 47", got.LastWithPermit, got.FirstBelowOne, len(got.Rows))
	}
	// Base and the pods holding Base+1; every replica count uses all 40.
	type split struct{ base, extra int64 }
	splits := map[int]split{4: {10, 0}, 7: {5, 5}, 8: {5, 0}, 14: {2, 12}, 16: {2, 8}, 20: {2, 0}, 21: {1, 19}, 40: {1, 0}, 41: {0, 40}, 50: {0, 40}}
	for _, row := range got.Rows {
		if want, ok := splits[row.Replicas]; ok && (row.Result.Base != want.base || row.Result.Extra != want.extra || row.Result.PerPod.Permits != int(want.base)) {
			t.Errorf("%d replicas: base %d, extra %d, per pod %d; want %d, %d", row.Replicas, row.Result.Base, row.Result.Extra, row.Result.PerPod.Permits, want.base, want.extra)
		}
		if row.Result.TotalPermits != 40 {
			t.Errorf("%d replicas: %d permits in use, want all 40", row.Replicas, row.Result.TotalPermits)
		}
	}
	// This cluster's 20 of the 50: 16 usable, a whole permit up to 16 pods.
	if got, err := Sweep(with(in, func(in *Input) { in.ClusterConcurrency = 20 }), 10, 20); err != nil || got.LastWithPermit != 16 || got.FirstBelowOne != 17 {
		t.Errorf("Sweep with a cluster share = LastWithPermit %d, FirstBelowOne %d, %v; want 16, 17", got.LastWithPermit, got.FirstBelowOne, err)
	}
	// A caller's part of 9 permits.
	if got, err := Sweep(with(in, func(in *Input) { in.Part = &Part{Permits: 9} }), 5, 12); err != nil || got.LastWithPermit != 9 || got.FirstBelowOne != 10 {
		t.Errorf("Sweep with a part = LastWithPermit %d, FirstBelowOne %d, %v; want 9, 10", got.LastWithPermit, got.FirstBelowOne, err)
	}

	if got, err := Sweep(in, 1, 40); err != nil || got.FirstBelowOne != 0 {
		t.Errorf("Sweep(1..40) = FirstBelowOne %d, %v; want 0 (every divisor gives a permit)", got.FirstBelowOne, err)
	}
	if got, err := Sweep(in, 60, 61); err != nil || got.FirstBelowOne != 60 {
		t.Errorf("Sweep(60..61) = FirstBelowOne %d, %v; want 60", got.FirstBelowOne, err)
	}

	for _, tt := range []struct {
		lo, hi int
		input  string
	}{{0, 5, "MinReplicas"}, {5, 4, "MaxReplicas"}, {1, MaxSweep + 1, "MaxReplicas"}} {
		_, err := Sweep(in, tt.lo, tt.hi)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Input != tt.input {
			t.Errorf("Sweep(%d, %d) error = %v, want one naming %s", tt.lo, tt.hi, err, tt.input)
		}
	}
	if _, err := Sweep(in, 1, MaxSweep); err != nil {
		t.Errorf("Sweep over MaxSweep divisors: %v", err)
	}
}
