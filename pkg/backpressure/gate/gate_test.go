package gate_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

func mustNew(t *testing.T, l gate.Limits) *gate.Gate {
	t.Helper()
	g, err := gate.New("test", l)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// wantRejection fails the test unless err is a *Rejection for reason want.
func wantRejection(t *testing.T, err error, want gate.Reason) {
	t.Helper()
	var r *gate.Rejection
	if !errors.As(err, &r) {
		t.Fatalf("error %v is not a *gate.Rejection", err)
	}
	if r.Reason != want {
		t.Fatalf("reason = %v, want %v (error %v)", r.Reason, want, err)
	}
}

// eventually polls cond for up to five seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPermitsAndIdempotentRelease(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 2})

	p1, err := g.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.TryAcquire(ctx); !errors.Is(err, gate.ErrQueueFull) {
		t.Fatalf("third TryAcquire: err = %v, want ErrQueueFull", err)
	}

	p1.Release()
	p1.Release() // a no-op, not a second release
	if p1.Held() {
		t.Error("Held() after Release = true")
	}
	if got := g.Stats().InFlight; got != 1 {
		t.Fatalf("InFlight after double Release = %d, want 1", got)
	}
	p3, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after one release: %v", err)
	}
	if _, err := g.TryAcquire(ctx); err == nil {
		t.Fatal("double Release freed two permits")
	}
	p2.Release()
	p3.Release()
	var zero gate.Permit
	zero.Release() // the zero Permit holds nothing

	st := g.Stats()
	if st.InFlight != 0 || st.Admitted != 3 || st.Rejected[gate.QueueFull] != 2 {
		t.Errorf("Stats = in-flight %d, admitted %d, queue_full %d; want 0, 3, 2", st.InFlight, st.Admitted, st.Rejected[gate.QueueFull])
	}
}

func TestReleaseFuncReleasesOnce(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 3})
	var held [3]gate.Permit
	for i := range held {
		var err error
		if held[i], err = g.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	release := held[0].ReleaseFunc()
	if held[0].Held() {
		t.Error("Permit still held after ReleaseFunc")
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(release)
	}
	wg.Wait()
	held[0].Release() // moved out: a no-op
	if got := g.Stats().InFlight; got != 2 {
		t.Errorf("InFlight = %d, want 2", got)
	}
	held[1].Release()
	held[2].Release()
}

func TestRejections(t *testing.T) {
	t0 := time.Now().Add(time.Hour) // stepped by hand; in the future so deadlines are not yet passed
	tests := []struct {
		name      string
		limits    gate.Limits
		setup     func(t *testing.T, g *gate.Gate) // leaves the gate in the state under test
		ctx       func() (context.Context, context.CancelFunc)
		now       time.Time
		wantErr   error
		wantAfter time.Duration
	}{
		{
			name:    "closed",
			limits:  gate.Limits{Permits: 1},
			setup:   func(_ *testing.T, g *gate.Gate) { g.Close() },
			now:     t0,
			wantErr: gate.ErrClosed,
		},
		{
			name:   "deadline shorter than typical latency",
			limits: gate.Limits{Permits: 1, TypicalLatency: 100 * time.Millisecond},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithDeadline(context.Background(), t0.Add(99*time.Millisecond))
			},
			now:     t0,
			wantErr: gate.ErrDeadlineTooShort,
		},
		{
			name:   "rate limited with the time to the next token",
			limits: gate.Limits{Permits: 10, RatePerSecond: 10, Burst: 2},
			setup: func(t *testing.T, g *gate.Gate) {
				for range 2 { // spend the burst
					p, err := g.TryAcquireAt(context.Background(), t0)
					if err != nil {
						t.Fatal(err)
					}
					p.Release()
				}
			},
			now:       t0.Add(25 * time.Millisecond), // a quarter token refilled
			wantErr:   gate.ErrRateLimited,
			wantAfter: 75 * time.Millisecond,
		},
		{
			name:    "no permits and no waiting room",
			limits:  gate.Limits{Permits: 0},
			now:     t0,
			wantErr: gate.ErrQueueFull,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := gate.New("logistics", tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.UpdateAt(tt.limits, t0); err != nil { // the token bucket starts full at t0
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, g)
			}
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()

			_, err = g.TryAcquireAt(ctx, tt.now)
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, gate.ErrRejected) {
				t.Fatalf("err = %v, want %v and ErrRejected", err, tt.wantErr)
			}
			var r *gate.Rejection
			if !errors.As(err, &r) {
				t.Fatalf("err %T is not a *Rejection", err)
			}
			if r.Gate != "logistics" || r.RetryAfter != tt.wantAfter || !r.LocalRejection() {
				t.Errorf("Rejection = %+v, want gate logistics, RetryAfter %v, local", r, tt.wantAfter)
			}
			if got := g.Stats().Rejected[r.Reason]; got != 1 {
				t.Errorf("Rejected[%v] = %d, want 1", r.Reason, got)
			}
		})
	}
}

func TestRateRefillsWithSteppedTime(t *testing.T) {
	t0 := time.Now().Add(time.Hour) // stepped by hand; in the future so deadlines are not yet passed
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 10})
	if err := g.UpdateAt(gate.Limits{Permits: 10, RatePerSecond: 4}, t0); err != nil { // burst 0 means 1
		t.Fatal(err)
	}
	var admitted []time.Duration
	for step := time.Duration(0); step <= time.Second; step += 50 * time.Millisecond {
		if p, err := g.TryAcquireAt(ctx, t0.Add(step)); err == nil {
			admitted = append(admitted, step)
			p.Release()
		} else if !errors.Is(err, gate.ErrRateLimited) {
			t.Fatal(err)
		}
	}
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}
	if diff := cmp.Diff(want, admitted); diff != "" {
		t.Errorf("admission times (-want +got):\n%s", diff)
	}

	// Turning the rate off skips the bucket entirely.
	if err := g.UpdateAt(gate.Limits{Permits: 10}, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p, err := g.TryAcquireAt(ctx, t0.Add(time.Second))
		if err != nil {
			t.Fatalf("rate 0 still limits: %v", err)
		}
		p.Release()
	}
}

// queue starts n goroutines that each Acquire, in order, each one queued
// before the next starts, and returns a channel that receives each one's index
// when it is admitted (or its error as -1).
func queue(ctx context.Context, t *testing.T, g *gate.Gate, n int) (<-chan int, <-chan error) {
	t.Helper()
	admitted := make(chan int, n)
	errs := make(chan error, n)
	base := g.Stats().Queued
	for i := range n {
		go func() {
			p, err := g.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			admitted <- i
			p.Release()
		}()
		eventually(t, "waiter is queued", func() bool { return g.Stats().Queued == base+i+1 })
	}
	return admitted, errs
}

func TestFIFOAndNoBarging(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 10})
	holder, err := g.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each waiter holds its permit until the test has seen it: block them.
	release := make(chan struct{})
	admitted := make(chan int, 5)
	for i := range 5 {
		go func() {
			p, err := g.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			admitted <- i
			<-release
			p.Release()
		}()
		eventually(t, "waiter is queued", func() bool { return g.Stats().Queued == i+1 })
	}

	holder.Release()
	// The permit went to the first waiter inside Release: a newcomer must
	// not get it, even though it arrives before that waiter runs.
	if _, err := g.TryAcquire(ctx); !errors.Is(err, gate.ErrQueueFull) {
		t.Fatalf("newcomer barged past the waiters: err = %v", err)
	}
	var order []int
	for range 5 {
		order = append(order, <-admitted)
		release <- struct{}{}
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3, 4}, order); diff != "" {
		t.Errorf("admission order (-want +got):\n%s", diff)
	}
	eventually(t, "all released", func() bool { return g.Stats().InFlight == 0 })
}

func TestUpdateGrowAdmitsWaitersAtOnce(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 3})
	holder, _ := g.Acquire(ctx)
	defer holder.Release()
	admitted, _ := queue(ctx, t, g, 3)

	if err := g.Update(gate.Limits{Permits: 4, QueueCapacity: 3}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-admitted:
		case <-time.After(5 * time.Second):
			t.Fatal("growing the limit did not admit the waiters")
		}
	}
}

func TestUpdateShrinkWaitsForAttrition(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 4})
	var held [4]gate.Permit
	for i := range held {
		held[i], _ = g.Acquire(ctx)
	}
	if err := g.Update(gate.Limits{Permits: 2}); err != nil {
		t.Fatal(err)
	}
	if got := g.Stats().InFlight; got != 4 {
		t.Fatalf("shrinking pre-empted: InFlight = %d, want 4", got)
	}
	for i := range 2 {
		held[i].Release() // in flight 3, then 2: still not below the new limit
		if _, err := g.TryAcquire(ctx); !errors.Is(err, gate.ErrQueueFull) {
			t.Fatalf("admitted with %d in flight and limit 2 (err %v)", 3-i, err)
		}
	}
	held[2].Release() // in flight 1
	p, err := g.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("not admitted below the new limit: %v", err)
	}
	p.Release()
	held[3].Release()
}

func TestUpdateShrinkQueueKeepsWaiters(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 3})
	holder, _ := g.Acquire(ctx)
	admitted, _ := queue(ctx, t, g, 3)

	if err := g.Update(gate.Limits{Permits: 1, QueueCapacity: 1}); err != nil {
		t.Fatal(err)
	}
	if got := g.Stats().Queued; got != 3 {
		t.Fatalf("Queued after shrinking the queue = %d, want 3", got)
	}
	if _, err := g.Acquire(ctx); !errors.Is(err, gate.ErrQueueFull) {
		t.Fatalf("new arrival: err = %v, want ErrQueueFull", err)
	}
	holder.Release()
	for range 3 {
		select {
		case <-admitted:
		case <-time.After(5 * time.Second):
			t.Fatal("a kept waiter was never admitted")
		}
	}
}

func TestWaitBounds(t *testing.T) {
	tests := []struct {
		name    string
		limits  gate.Limits
		timeout time.Duration // of the caller's context; 0 for none
		wantErr error
	}{
		{"max queue wait", gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: 20 * time.Millisecond}, 0, gate.ErrWaitTimeout},
		{"acquire timeout", gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: time.Hour, AcquireTimeout: 20 * time.Millisecond}, 0, gate.ErrWaitTimeout},
		{"deadline minus typical latency", gate.Limits{Permits: 1, QueueCapacity: 1, TypicalLatency: time.Second}, time.Second + 20*time.Millisecond, gate.ErrDeadlineTooShort},
		{"caller's context", gate.Limits{Permits: 1, QueueCapacity: 1}, 20 * time.Millisecond, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := mustNew(t, tt.limits)
			holder, _ := g.Acquire(context.Background())
			defer holder.Release()
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			_, err := g.Acquire(ctx)
			waited := time.Since(start)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if waited < 15*time.Millisecond || waited > 2*time.Second {
				t.Errorf("waited %v, want about 20ms", waited)
			}
			st := g.Stats()
			if st.Queued != 0 {
				t.Errorf("Queued = %d after the waiter left, want 0", st.Queued)
			}
			if st.QueueWait.Count != 1 || st.QueueWait.Sum < 15*time.Millisecond {
				t.Errorf("QueueWait = %+v, want one observation of about 20ms", st.QueueWait)
			}
		})
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 5})
	holder, _ := g.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	_, errs := queue(ctx, t, g, 4)
	cancel()
	for range 4 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	}
	st := g.Stats()
	if st.Queued != 0 || st.InFlight != 1 {
		t.Errorf("after cancel: Queued %d, InFlight %d; want 0, 1", st.Queued, st.InFlight)
	}
	for _, r := range gate.Reasons {
		if st.Rejected[r] != 0 {
			t.Errorf("a cancelled wait counted as rejection %v", r)
		}
	}
	holder.Release()
	if _, err := g.TryAcquire(context.Background()); err != nil {
		t.Errorf("permit lost after cancelled waiters: %v", err)
	}
}

func TestCloseRejectsWaitersAndNewcomers(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 1, QueueCapacity: 5})
	holder, _ := g.Acquire(ctx)
	_, errs := queue(ctx, t, g, 3)
	g.Close()
	g.Close()
	for range 3 {
		wantRejection(t, <-errs, gate.Closed)
	}
	wantRejection(t, g.Do(ctx, func(context.Context) error { return nil }), gate.Closed)
	holder.Release() // in-flight calls still release
	st := g.Stats()
	if st.InFlight != 0 || st.Queued != 0 || st.Rejected[gate.Closed] != 4 {
		t.Errorf("Stats = in-flight %d, queued %d, closed %d; want 0, 0, 4", st.InFlight, st.Queued, st.Rejected[gate.Closed])
	}
}

func TestZeroValueGate(t *testing.T) {
	var g gate.Gate
	wantRejection(t, g.Do(context.Background(), func(context.Context) error { return nil }), gate.QueueFull)
	if err := g.Update(gate.Limits{Permits: 1, RatePerSecond: 100}); err != nil {
		t.Fatal(err)
	}
	if err := g.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Errorf("after Update: %v", err)
	}
}

func TestDo(t *testing.T) {
	g := mustNew(t, gate.Limits{Permits: 1})
	want := errors.New("downstream failed")
	err := g.Do(context.Background(), func(context.Context) error {
		if got := g.Stats().InFlight; got != 1 {
			t.Errorf("InFlight inside Do = %d, want 1", got)
		}
		return want
	})
	if !errors.Is(err, want) {
		t.Errorf("Do = %v, want fn's error", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = g.Do(context.Background(), func(context.Context) error { panic("boom") })
	}()
	if got := g.Stats().InFlight; got != 0 {
		t.Errorf("InFlight after Do returned or panicked = %d, want 0", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		limits gate.Limits
		ok     bool
	}{
		{"zero", gate.Limits{}, true},
		{"full", gate.Limits{Permits: gate.MaxPermits, RatePerSecond: 0.5, Burst: 3, QueueCapacity: 9, MaxQueueWait: time.Second, AcquireTimeout: time.Second, TypicalLatency: time.Second}, true},
		{"negative permits", gate.Limits{Permits: -1}, false},
		{"too many permits", gate.Limits{Permits: gate.MaxPermits + 1}, false},
		{"negative rate", gate.Limits{RatePerSecond: -1}, false},
		{"infinite rate", gate.Limits{RatePerSecond: math.Inf(1)}, false},
		{"NaN rate", gate.Limits{RatePerSecond: math.NaN()}, false},
		{"negative burst", gate.Limits{Burst: -1}, false},
		{"negative queue", gate.Limits{QueueCapacity: -1}, false},
		{"negative wait", gate.Limits{MaxQueueWait: -1}, false},
		{"negative latency", gate.Limits{TypicalLatency: -time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
			g := mustNew(t, gate.Limits{Permits: 7})
			if err := g.Update(tt.limits); (err == nil) != tt.ok {
				t.Fatalf("Update() = %v", err)
			}
			if !tt.ok && g.Limits().Permits != 7 {
				t.Error("an invalid Update changed the limits")
			}
		})
	}
}

func TestAdmittedCountSurvivesFolds(t *testing.T) {
	if testing.Short() {
		t.Skip("a million admissions")
	}
	// The state word counts only the latest admissions and the slow path
	// folds them into a wider counter every few tens of thousands; cross
	// that point many times.
	g := mustNew(t, gate.Limits{Permits: 1})
	const n = 1<<20 + 3
	ctx := context.Background()
	for range n {
		p, err := g.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p.Release()
	}
	if got := g.Stats().Admitted; got != n {
		t.Errorf("Admitted = %d, want %d", got, n)
	}
}

func TestRejectionStrings(t *testing.T) {
	got := []string{
		(&gate.Rejection{Reason: gate.RateLimited, Gate: "logistics", RetryAfter: 120 * time.Millisecond}).Error(),
		(&gate.Rejection{Reason: gate.QueueFull, Gate: "logistics"}).Error(),
		gate.DeadlineTooShort.String(),
		gate.Reason(99).String(),
	}
	want := []string{
		`gate "logistics": rate limited, retry after 120ms`,
		`gate "logistics": queue full`,
		"deadline_too_short",
		"Reason(99)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAcquireReleaseDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters change allocation")
	}
	for _, l := range []gate.Limits{
		{Permits: 4, QueueCapacity: 4, MaxQueueWait: time.Second},
		{Permits: 4, TypicalLatency: time.Second},
	} {
		g := mustNew(t, l)
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			p, err := g.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p.Release()
		})
		if allocs != 0 {
			t.Errorf("Acquire+Release with %+v: %v allocations, want 0", l, allocs)
		}
	}
}

func TestInFlightFollowsAdmissionsAndReleases(t *testing.T) {
	ctx := context.Background()
	g := mustNew(t, gate.Limits{Permits: 3, QueueCapacity: 1, MaxQueueWait: time.Minute})
	var held [3]gate.Permit
	for i := range held {
		if got := g.InFlight(); got != i {
			t.Fatalf("InFlight = %d, want %d", got, i)
		}
		var err error
		if held[i], err = g.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A waiter is not in flight.
	waited := make(chan error, 1)
	go func() {
		p, err := g.Acquire(ctx)
		if err == nil {
			p.Release()
		}
		waited <- err
	}()
	eventually(t, "the caller waits", func() bool { return g.Stats().Queued == 1 })
	if got := g.InFlight(); got != 3 {
		t.Fatalf("InFlight with a waiter = %d, want 3", got)
	}
	// After a shrink, InFlight stays above the limit until releases bring
	// it down: what a caller acknowledging the smaller share waits for.
	if err := g.Update(gate.Limits{Permits: 1, QueueCapacity: 1, MaxQueueWait: time.Minute}); err != nil {
		t.Fatal(err)
	}
	held[0].Release()
	held[1].Release()
	if got := g.InFlight(); got != 1 {
		t.Fatalf("InFlight = %d, want 1", got)
	}
	held[2].Release() // the waiter is admitted, then releases
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	eventually(t, "every permit is back", func() bool { return g.InFlight() == 0 })
	if got := g.Stats().InFlight; got != 0 {
		t.Errorf("Stats().InFlight = %d after InFlight() = 0", got)
	}
}
