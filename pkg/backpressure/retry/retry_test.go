package retry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// statusError stands for a downstream's answer, as a caller's own error type
// would carry it.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("downstream answered %d", e.code) }

// retry503 retries 503s only: a 429 means the downstream is over capacity.
func retry503(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == 503
}

func constRand(v float64) func() float64 { return func() float64 { return v } }

// attempts calls retry.Do with fn failing with errs in turn (nil once they
// run out) and returns the number of attempts and Do's error.
func attempts(ctx context.Context, p retry.Policy, errs ...error) (int, error) {
	n := 0
	err := retry.Do(ctx, p, func(context.Context) error {
		n++
		if n <= len(errs) {
			return errs[n-1]
		}
		return nil
	})
	return n, err
}

func TestBackoffFullJitter(t *testing.T) {
	p := retry.Policy{BaseDelay: 10 * time.Millisecond, MaxDelay: 70 * time.Millisecond}
	var got []time.Duration
	for n := range 5 {
		p.Rand = constRand(0.5)
		got = append(got, p.Backoff(n))
	}
	p.Rand = constRand(0)
	got = append(got, p.Backoff(3))
	p.Rand = constRand(0.999)
	got = append(got, p.Backoff(100)) // capped, no overflow
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 35 * time.Millisecond, 35 * time.Millisecond, 0, 69930 * time.Microsecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Backoff (-want +got):\n%s", diff)
	}

	var zero retry.Policy
	zero.Rand = constRand(0.5)
	if d := zero.Backoff(0); d != retry.DefaultBaseDelay/2 {
		t.Errorf("zero policy Backoff(0) = %v, want half of DefaultBaseDelay", d)
	}
	huge := retry.Policy{BaseDelay: time.Second, MaxDelay: math.MaxInt64, Rand: constRand(0.5)}
	if d := huge.Backoff(80); d <= 0 {
		t.Errorf("Backoff overflowed: %v", d)
	}
}

func TestDo(t *testing.T) {
	e503, e429 := &statusError{503}, &statusError{429}
	gateRejection := &gate.Rejection{Reason: gate.QueueFull, Gate: "logistics"}
	dispatchRejection := &dispatch.Rejection{Reason: dispatch.QueueFull, Dispatcher: "fanout"}
	tests := []struct {
		name         string
		policy       retry.Policy
		errs         []error
		wantAttempts int
		wantIs       []error // errors.Is must hold for each
		wantNil      bool
	}{
		{name: "success at once", policy: retry.Policy{MaxRetries: 3, Retryable: retry503}, wantAttempts: 1, wantNil: true},
		{name: "retried until success", policy: retry.Policy{MaxRetries: 3, Retryable: retry503}, errs: []error{e503, e503}, wantAttempts: 3, wantNil: true},
		{name: "max retries spent", policy: retry.Policy{MaxRetries: 2, Retryable: retry503}, errs: []error{e503, e503, e503, e503}, wantAttempts: 3, wantIs: []error{e503}},
		{name: "429 is not retryable", policy: retry.Policy{MaxRetries: 3, Retryable: retry503}, errs: []error{e429}, wantAttempts: 1, wantIs: []error{e429}},
		{name: "no classifier retries nothing", policy: retry.Policy{MaxRetries: 3}, errs: []error{e503}, wantAttempts: 1, wantIs: []error{e503}},
		{name: "gate rejection is never retried", policy: retry.Policy{MaxRetries: 3, Retryable: func(error) bool { return true }}, errs: []error{fmt.Errorf("calling logistics: %w", gateRejection)}, wantAttempts: 1, wantIs: []error{gate.ErrQueueFull}},
		{name: "dispatcher rejection is never retried", policy: retry.Policy{MaxRetries: 3, Retryable: func(error) bool { return true }}, errs: []error{dispatchRejection}, wantAttempts: 1, wantIs: []error{dispatch.ErrQueueFull}},
		{name: "no budget, no retry", policy: retry.Policy{MaxRetries: 3, Retryable: retry503, Budget: nil}, errs: []error{e503}, wantAttempts: 1, wantIs: []error{e503, retry.ErrBudgetExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			p.Rand = constRand(0) // no sleeping
			if p.Budget == nil && tt.name != "no budget, no retry" {
				p.Budget = retry.NewBudget("logistics", math.Inf(1), 0)
			}
			n, err := attempts(context.Background(), p, tt.errs...)
			if n != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", n, tt.wantAttempts)
			}
			if (err == nil) != tt.wantNil {
				t.Fatalf("err = %v, want nil %v", err, tt.wantNil)
			}
			for _, target := range tt.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("errors.Is(%v, %v) = false", err, target)
				}
			}
			if p.Budget != nil {
				if got := p.Budget.Stats().Retries; got != uint64(n-1) {
					t.Errorf("budget Retries = %d, want %d", got, n-1)
				}
			}
		})
	}
}

func TestDoStopsWhenTheBudgetIsEmpty(t *testing.T) {
	t0 := time.Now()
	b := retry.NewBudget("logistics", 0.001, 2)
	b.SetRateAt(t0, 0.001, 2)
	p := retry.Policy{MaxRetries: 10, Retryable: retry503, Budget: b, Rand: constRand(0)}
	e503 := &statusError{503}
	n, err := attempts(context.Background(), p, e503, e503, e503, e503, e503)
	if n != 3 {
		t.Errorf("attempts = %d, want 3 (two tokens)", n)
	}
	if !errors.Is(err, retry.ErrBudgetExhausted) || !errors.Is(err, e503) {
		t.Errorf("err = %v, want the 503 and ErrBudgetExhausted", err)
	}
	if got, want := err.Error(), "downstream answered 503 (retry: budget exhausted)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	st := b.Stats()
	if st.Retries != 2 || st.Exhausted != 1 {
		t.Errorf("Stats = %+v, want 2 retries, 1 exhausted", st)
	}
	// The budget is shared: the next call gets no retry at all.
	if n, _ := attempts(context.Background(), p, e503, e503); n != 1 {
		t.Errorf("next call made %d attempts, want 1", n)
	}
}

func TestDoStopsAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	b := retry.NewBudget("logistics", math.Inf(1), 0)
	p := retry.Policy{MaxRetries: 5, BaseDelay: time.Second, MaxDelay: time.Second, Retryable: retry503, Budget: b, Rand: constRand(0.9)}
	start := time.Now()
	n, err := attempts(ctx, p, &statusError{503})
	if n != 1 || !errors.Is(err, retry.ErrNoTimeLeft) {
		t.Errorf("attempts %d, err %v; want 1 and ErrNoTimeLeft", n, err)
	}
	if waited := time.Since(start); waited > 100*time.Millisecond {
		t.Errorf("Do waited %v for a backoff that could not fit", waited)
	}
	if st := b.Stats(); st.Retries != 0 || st.Exhausted != 0 {
		t.Errorf("a retry that never fit took from the budget: %+v", st)
	}
}

func TestDoStopsWhenTheContextEndsDuringBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := retry.Policy{MaxRetries: 5, BaseDelay: time.Hour, MaxDelay: time.Hour, Retryable: retry503,
		Budget: retry.NewBudget("logistics", math.Inf(1), 0), Rand: constRand(0.5)}
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	n, err := attempts(ctx, p, &statusError{503}, &statusError{503})
	if n != 1 || !errors.Is(err, context.Canceled) || !retry503(err) {
		t.Errorf("attempts %d, err %v; want 1 and context.Canceled with the 503", n, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("Do slept through the cancellation: %v", waited)
	}
}

func TestDoSleepsTheBackoff(t *testing.T) {
	p := retry.Policy{MaxRetries: 1, BaseDelay: 30 * time.Millisecond, Retryable: retry503,
		Budget: retry.NewBudget("logistics", math.Inf(1), 0), Rand: constRand(0.999)}
	start := time.Now()
	if n, err := attempts(context.Background(), p, &statusError{503}); err != nil || n != 2 {
		t.Fatalf("err %v, attempts %d", err, n)
	}
	if waited := time.Since(start); waited < 25*time.Millisecond {
		t.Errorf("retried after %v, want the ~30ms backoff", waited)
	}
}

func TestBudgetRates(t *testing.T) {
	t0 := time.Now()
	tests := []struct {
		name      string
		perSecond float64
		burst     int
		at        []time.Duration // offsets of successive AllowAt calls
		want      []bool
	}{
		{"two per second, burst one", 2, 1, []time.Duration{0, 0, 400 * time.Millisecond, 500 * time.Millisecond}, []bool{true, false, false, true}},
		{"default burst is a second's worth", 2.5, 0, []time.Duration{0, 0, 0, 0}, []bool{true, true, true, false}},
		{"zero allows nothing", 0, 5, []time.Duration{0, time.Hour}, []bool{false, false}},
		{"NaN allows nothing", math.NaN(), 5, []time.Duration{0}, []bool{false}},
		{"infinite allows everything", math.Inf(1), 0, []time.Duration{0, 0, 0}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b retry.Budget // the zero value, given a rate
			b.SetRateAt(t0, tt.perSecond, tt.burst)
			var got []bool
			for _, d := range tt.at {
				got = append(got, b.AllowAt(t0.Add(d)))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("AllowAt (-want +got):\n%s", diff)
			}
		})
	}

	var zero retry.Budget
	if zero.Allow() || zero.Stats().Exhausted != 1 {
		t.Error("the zero Budget allowed a retry or did not count the refusal")
	}
}

func TestBudgetResizeKeepsTokens(t *testing.T) {
	t0 := time.Now()
	b := retry.NewBudget("logistics", 10, 10)
	b.SetRateAt(t0, 10, 10)
	b.SetRateAt(t0, 1, 3) // fewer tokens fit: keep three
	var allowed int
	for b.AllowAt(t0) {
		allowed++
	}
	if allowed != 3 {
		t.Errorf("allowed %d after shrinking the burst to 3, want 3", allowed)
	}
	if st := b.Stats(); st.PerSecond != 1 || st.Burst != 3 {
		t.Errorf("Stats = %+v, want rate 1, burst 3", st)
	}
}

func TestBudgetConcurrentUseAndResize(t *testing.T) {
	b := retry.NewBudget("logistics", 1000, 10)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 500 {
				if i == 0 && j%50 == 0 {
					b.SetRate(float64(100+j), 5+j%10)
				}
				b.Allow()
			}
		})
	}
	wg.Wait()
	st := b.Stats()
	if st.Exhausted == 0 || st.Exhausted >= 4000 {
		t.Errorf("Exhausted = %d of 4000 calls; a budget of ~1000/s should refuse some but not all", st.Exhausted)
	}
}
