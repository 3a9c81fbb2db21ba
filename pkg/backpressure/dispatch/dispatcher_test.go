package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
)

func mustNew(t *testing.T, l dispatch.Limits) *dispatch.Dispatcher {
	t.Helper()
	d, err := dispatch.New("test", l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Shutdown(ctx)
	})
	return d
}

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

// blocker is a task that runs until released, and counts how many of its
// kind run at once.
type blocker struct {
	release            chan struct{}
	running, highWater atomic.Int64
	ran                atomic.Int64
}

func newBlocker() *blocker { return &blocker{release: make(chan struct{})} }

func (b *blocker) task(context.Context) {
	n := b.running.Add(1)
	for hw := b.highWater.Load(); n > hw && !b.highWater.CompareAndSwap(hw, n); hw = b.highWater.Load() {
	}
	<-b.release
	b.running.Add(-1)
	b.ran.Add(1)
}

func submit(t *testing.T, d *dispatch.Dispatcher, n int, fn func(context.Context)) {
	t.Helper()
	for range n {
		if err := d.Submit(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueFullIsRejectedNotRunOnCaller(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 2, QueueCapacity: 2})
	b := newBlocker()
	submit(t, d, 2, b.task)
	eventually(t, "both workers are busy", func() bool { return b.running.Load() == 2 })
	submit(t, d, 2, b.task)
	if got := d.Stats().Queued; got != 2 {
		t.Fatalf("Queued = %d, want 2", got)
	}

	var ranOnCaller atomic.Bool
	err := d.Submit(context.Background(), func(context.Context) { ranOnCaller.Store(true) })
	if !errors.Is(err, dispatch.ErrQueueFull) || !errors.Is(err, dispatch.ErrRejected) {
		t.Fatalf("Submit on a full queue: err = %v, want ErrQueueFull", err)
	}
	var r *dispatch.Rejection
	if !errors.As(err, &r) || r.Reason != dispatch.QueueFull || r.Dispatcher != "test" || !r.LocalRejection() {
		t.Fatalf("Rejection = %+v", r)
	}
	if err.Error() != `dispatcher "test": queue full` {
		t.Errorf("Error() = %q", err.Error())
	}

	close(b.release)
	eventually(t, "every accepted task ran", func() bool { return d.Stats().Completed == 4 })
	if ranOnCaller.Load() {
		t.Error("the rejected task ran")
	}
	if b.highWater.Load() > 2 {
		t.Errorf("%d tasks ran at once on 2 workers", b.highWater.Load())
	}
	st := d.Stats()
	if st.Rejected[dispatch.QueueFull] != 1 || st.QueueWait.Count != 2 {
		t.Errorf("Stats: queue_full %d, queue waits %d; want 1 and 2 (only queued tasks)", st.Rejected[dispatch.QueueFull], st.QueueWait.Count)
	}
}

func TestZeroQueueAcceptsOnlyForIdleWorkers(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 3})
	b := newBlocker()
	submit(t, d, 3, b.task)
	if err := d.Submit(context.Background(), b.task); !errors.Is(err, dispatch.ErrQueueFull) {
		t.Fatalf("fourth task: err = %v, want ErrQueueFull", err)
	}
	close(b.release)
	eventually(t, "three tasks ran", func() bool { return d.Stats().Completed == 3 })
}

func TestQueuedTaskLeavesWhenContextEnds(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 1, QueueCapacity: 5})
	b := newBlocker()
	submit(t, d, 1, b.task)
	eventually(t, "the worker is busy", func() bool { return b.running.Load() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Int64
	for range 3 {
		if err := d.Submit(ctx, func(context.Context) { ran.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, d, 1, b.task) // behind them, with a context that does not end
	cancel()
	eventually(t, "cancelled tasks left the queue", func() bool { return d.Stats().Queued == 1 })
	if got := d.Stats().Rejected[dispatch.ContextDone]; got != 3 {
		t.Errorf("ContextDone = %d, want 3", got)
	}
	// Their slots are free again.
	submit(t, d, 4, b.task)

	if err := d.Submit(ctx, b.task); !errors.Is(err, context.Canceled) {
		t.Errorf("Submit with a done context: err = %v, want context.Canceled", err)
	}
	close(b.release)
	eventually(t, "the rest ran", func() bool { return b.ran.Load() == 6 })
	if ran.Load() != 0 {
		t.Errorf("%d cancelled tasks ran", ran.Load())
	}
	if got := d.Stats().Rejected[dispatch.ContextDone]; got != 4 {
		t.Errorf("ContextDone = %d, want 4", got)
	}
}

func TestUpdateGrowStartsQueuedTasks(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 1, QueueCapacity: 3})
	b := newBlocker()
	submit(t, d, 4, b.task)
	eventually(t, "one runs, three queue", func() bool { return b.running.Load() == 1 && d.Stats().Queued == 3 })
	if err := d.Update(dispatch.Limits{Workers: 4, QueueCapacity: 3}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the queued tasks start", func() bool { return b.running.Load() == 4 })
	close(b.release)
}

func TestUpdateShrinkByAttrition(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 4, QueueCapacity: 10})
	first := newBlocker()
	submit(t, d, 4, first.task)
	eventually(t, "four run", func() bool { return first.running.Load() == 4 })
	if err := d.Update(dispatch.Limits{Workers: 1, QueueCapacity: 10}); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Running != 4 || first.running.Load() != 4 {
		t.Fatalf("shrinking interrupted running tasks: Running %d, tasks running %d", st.Running, first.running.Load())
	}
	second := newBlocker()
	submit(t, d, 5, second.task)
	close(first.release)
	eventually(t, "surplus workers exit", func() bool { return d.Stats().Running == 1 })
	close(second.release)
	eventually(t, "the queue drains", func() bool { return second.ran.Load() == 5 })
	if hw := second.highWater.Load(); hw != 1 {
		t.Errorf("%d tasks ran at once after shrinking to 1 worker", hw)
	}
}

func TestUpdateShrinkQueueKeepsTasks(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 1, QueueCapacity: 3})
	b := newBlocker()
	submit(t, d, 4, b.task)
	eventually(t, "three queue", func() bool { return d.Stats().Queued == 3 })
	if err := d.Update(dispatch.Limits{Workers: 1, QueueCapacity: 1}); err != nil {
		t.Fatal(err)
	}
	if got := d.Stats().Queued; got != 3 {
		t.Fatalf("Queued = %d after shrinking the queue, want 3", got)
	}
	if err := d.Submit(context.Background(), b.task); !errors.Is(err, dispatch.ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	close(b.release)
	eventually(t, "the kept tasks ran", func() bool { return b.ran.Load() == 4 })
}

func TestShutdownDrains(t *testing.T) {
	base := runtime.NumGoroutine()
	d, err := dispatch.New("test", dispatch.Limits{Workers: 2, QueueCapacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	submit(t, d, 10, func(context.Context) { time.Sleep(time.Millisecond); ran.Add(1) })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 10 {
		t.Errorf("Shutdown returned with %d of 10 tasks run", ran.Load())
	}
	if err := d.Submit(context.Background(), func(context.Context) {}); !errors.Is(err, dispatch.ErrClosed) {
		t.Errorf("Submit after Shutdown: err = %v, want ErrClosed", err)
	}
	if err := d.Update(dispatch.Limits{Workers: 3}); !errors.Is(err, dispatch.ErrClosed) {
		t.Errorf("Update after Shutdown: err = %v, want ErrClosed", err)
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	st := d.Stats()
	if st.Running != 0 || st.Rejected[dispatch.Closed] != 1 {
		t.Errorf("Stats: Running %d, closed %d; want 0, 1", st.Running, st.Rejected[dispatch.Closed])
	}
	eventually(t, "the workers exit", func() bool { return runtime.NumGoroutine() <= base })
}

func TestShutdownGivesUpAtItsDeadline(t *testing.T) {
	d, err := dispatch.New("test", dispatch.Limits{Workers: 1, QueueCapacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	b := newBlocker()
	submit(t, d, 4, b.task)
	eventually(t, "one runs", func() bool { return b.running.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := d.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want DeadlineExceeded", err)
	}
	st := d.Stats()
	if st.Queued != 0 || st.Rejected[dispatch.Shutdown] != 3 || b.running.Load() != 1 {
		t.Errorf("after giving up: Queued %d, shutdown drops %d, running %d; want 0, 3, 1 (left to finish)",
			st.Queued, st.Rejected[dispatch.Shutdown], b.running.Load())
	}
	close(b.release)
	if err := d.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after the running task finished: %v", err)
	}
	if b.ran.Load() != 1 {
		t.Errorf("%d tasks ran, want only the one already running", b.ran.Load())
	}
}

func TestZeroWorkers(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 0, QueueCapacity: 1})
	var ran atomic.Bool
	if err := d.Submit(context.Background(), func(context.Context) { ran.Store(true) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if ran.Load() {
		t.Fatal("a task ran with no workers")
	}
	if err := d.Update(dispatch.Limits{Workers: 1, QueueCapacity: 1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the added worker runs it", ran.Load)
}

// goroutinesBack waits, for a bounded time, until the process has no more
// goroutines than base: the workers take a moment to return after Shutdown
// has seen them decide to.
func goroutinesBack(t *testing.T, base int) {
	t.Helper()
	eventually(t, "every worker goroutine exits", func() bool { return runtime.NumGoroutine() <= base })
}

// A huge worker limit costs nothing up front: workers start one per task
// that finds no idle worker, idle ones are reused, a lower limit stops the
// surplus, and Shutdown leaves no goroutine behind.
func TestWorkersStartLazily(t *testing.T) {
	base := runtime.NumGoroutine()
	const huge = 2_000_000
	// The dispatcher's own count must be exact; the process's goroutines
	// may move by a couple for reasons of the test binary's own.
	const slack = 2
	d, err := dispatch.New("lazy", dispatch.Limits{Workers: huge, QueueCapacity: 10})
	if err != nil {
		t.Fatal(err)
	}
	if st, n := d.Stats(), runtime.NumGoroutine(); st.Running != 0 || n > base+slack {
		t.Fatalf("after New: Running %d, goroutines %d (was %d); want no worker yet", st.Running, n, base)
	}

	b := newBlocker()
	submit(t, d, 3, b.task)
	eventually(t, "three tasks run", func() bool { return b.running.Load() == 3 })
	if st, n := d.Stats(), runtime.NumGoroutine(); st.Running != 3 || st.Queued != 0 || n > base+3+slack {
		t.Fatalf("3 tasks under a limit of %d: Running %d, Queued %d, goroutines %d (was %d); want 3 workers",
			huge, st.Running, st.Queued, n, base)
	}
	close(b.release)
	eventually(t, "the three finish and park", func() bool { return d.Stats().Active == 0 })

	// Parked workers take the next tasks: no new goroutine.
	again := newBlocker()
	submit(t, d, 3, again.task)
	eventually(t, "three tasks run again", func() bool { return again.running.Load() == 3 })
	if st := d.Stats(); st.Running != 3 {
		t.Fatalf("Running %d after reusing idle workers, want 3", st.Running)
	}
	close(again.release)
	eventually(t, "they park again", func() bool { return d.Stats().Active == 0 })

	if err := d.Update(dispatch.Limits{Workers: 1, QueueCapacity: 10}); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Running != 1 {
		t.Fatalf("Running %d after lowering the limit to 1, want the idle surplus stopped", st.Running)
	}
	if err := d.Update(dispatch.Limits{Workers: huge, QueueCapacity: 10}); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Running != 1 {
		t.Fatalf("Running %d after raising the limit with nothing queued, want 1", st.Running)
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	goroutinesBack(t, base)
}

// Raising the limit starts workers for the queued tasks, not up to the
// limit.
func TestUpdateStartsWorkersForQueuedTasksOnly(t *testing.T) {
	d := mustNew(t, dispatch.Limits{Workers: 0, QueueCapacity: 10})
	b := newBlocker()
	submit(t, d, 3, b.task)
	if err := d.Update(dispatch.Limits{Workers: 1000, QueueCapacity: 10}); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Running != 3 {
		t.Fatalf("Running %d after raising the limit over 3 queued tasks, want 3", st.Running)
	}
	eventually(t, "the queued tasks run", func() bool { return b.running.Load() == 3 })
	close(b.release)
	eventually(t, "they finish", func() bool { return b.ran.Load() == 3 })
}

func TestValidate(t *testing.T) {
	tests := []struct {
		limits dispatch.Limits
		ok     bool
	}{
		{dispatch.Limits{}, true},
		{dispatch.Limits{Workers: 5, QueueCapacity: 9}, true},
		{dispatch.Limits{Workers: -1}, false},
		{dispatch.Limits{QueueCapacity: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.limits.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v.Validate() = %v, want ok %v", tt.limits, err, tt.ok)
		}
		if _, err := dispatch.New("x", tt.limits); (err == nil) != tt.ok {
			t.Errorf("New(%+v) = %v, want ok %v", tt.limits, err, tt.ok)
		}
	}
}

func TestReasonStrings(t *testing.T) {
	var got []string
	for _, r := range dispatch.Reasons {
		got = append(got, r.String())
	}
	got = append(got, dispatch.Reason(0).String())
	want := []string{"queue_full", "closed", "context_done", "shutdown", "Reason(0)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// workerHistory records every worker count the stress test puts in force,
// in order; an entry is written before the length that exposes it.
type workerHistory struct {
	n       atomic.Int64
	workers [1 << 16]int32
}

func (h *workerHistory) add(w int) {
	i := h.n.Load()
	h.workers[i] = int32(w)
	h.n.Store(i + 1)
}

// maxSince returns the largest worker count that can have been in force
// since the history had n0 entries (the last entry seen then may not have
// been applied yet, so the one before it counts too).
func (h *workerHistory) maxSince(n0 int64) int {
	hi := 0
	for i := max(0, n0-2); i < h.n.Load(); i++ {
		hi = max(hi, int(h.workers[i]))
	}
	return hi
}

// With a limit that does not change, many submitters never get more tasks
// running, nor more workers started, than the limit, however the lazy
// starts race with parked workers; and nothing outlives Shutdown.
func TestStressLimitHolds(t *testing.T) {
	duration := 500 * time.Millisecond
	if testing.Short() {
		duration = 100 * time.Millisecond
	}
	for _, limit := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			base := runtime.NumGoroutine()
			d, err := dispatch.New("limit", dispatch.Limits{Workers: limit, QueueCapacity: 4})
			if err != nil {
				t.Fatal(err)
			}
			var running, violations, ran, maxWorkers atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { // samples the workers started
				for {
					select {
					case <-stop:
						return
					default:
					}
					if w := int64(d.Stats().Running); w > maxWorkers.Load() {
						maxWorkers.Store(w)
					}
					time.Sleep(50 * time.Microsecond)
				}
			})
			for s := range 32 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(s), 7))
					for {
						select {
						case <-stop:
							return
						default:
						}
						sleep := rng.IntN(3) == 0
						err := d.Submit(context.Background(), func(context.Context) {
							if running.Add(1) > int64(limit) {
								violations.Add(1)
							}
							if sleep {
								time.Sleep(20 * time.Microsecond)
							}
							running.Add(-1)
							ran.Add(1)
						})
						if errors.Is(err, dispatch.ErrQueueFull) {
							runtime.Gosched()
						} else if err != nil {
							t.Errorf("Submit: %v", err)
						}
					}
				})
			}
			time.Sleep(duration)
			close(stop)
			wg.Wait()
			if err := d.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if v := violations.Load(); v != 0 {
				t.Errorf("%d times more than %d tasks ran at once", v, limit)
			}
			if w := maxWorkers.Load(); w > int64(limit) {
				t.Errorf("%d workers started under a limit of %d", w, limit)
			}
			if ran.Load() == 0 {
				t.Error("no task ran")
			}
			goroutinesBack(t, base)
		})
	}
}

// runningTasks counts the stress test's running tasks, each with the
// history length when it was submitted.
type runningTasks struct {
	mu        sync.Mutex
	submitted map[int64]int // history length at submission → tasks running
	n         int
}

// start records a task submitted at history length n0 and returns how many
// tasks run now, itself included, and the earliest submission among them.
func (r *runningTasks) start(n0 int64) (n int, earliest int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submitted[n0]++
	r.n++
	earliest = n0
	for k := range r.submitted {
		earliest = min(earliest, k)
	}
	return r.n, earliest
}

func (r *runningTasks) done(n0 int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.submitted[n0]--; r.submitted[n0] == 0 {
		delete(r.submitted, n0)
	}
	r.n--
}

// TestStressResizeUnderLoad submits from many goroutines while workers and
// queue are resized at random, some tasks with contexts that end, then shuts
// down. It checks that every accepted task ran exactly once or was counted
// as dropped; that whenever a task starts, no more tasks run than the
// largest worker count in force since the earliest of them was submitted
// (a worker takes a task only while the workers alive are within the count
// in force, and a shrink waits for running tasks, so the count that bounds
// them may be one in force when the oldest started); and that every
// goroutine is gone at the end.
//
// The second case draws a limit of two million one time in four, so that
// workers start lazily under a limit that could never be started eagerly,
// and shrinking from it stops the surplus.
func TestStressResizeUnderLoad(t *testing.T) {
	t.Run("small limits", func(t *testing.T) {
		stressResize(t, func(rng *rand.Rand) int { return rng.IntN(13) })
	})
	t.Run("huge limits", func(t *testing.T) {
		stressResize(t, func(rng *rand.Rand) int {
			if rng.IntN(4) == 0 {
				return 2_000_000
			}
			return rng.IntN(13)
		})
	})
}

func stressResize(t *testing.T, workers func(*rand.Rand) int) {
	duration := time.Second
	if testing.Short() {
		duration = 200 * time.Millisecond
	}
	base := runtime.NumGoroutine()
	initial := dispatch.Limits{Workers: 4, QueueCapacity: 16}
	d, err := dispatch.New("stress", initial)
	if err != nil {
		t.Fatal(err)
	}
	var hist workerHistory
	running := runningTasks{submitted: map[int64]int{}}
	hist.add(initial.Workers)
	var (
		accepted, refused, doneAtSubmit, ran atomic.Int64
		highWater, violations                atomic.Int64
		twice, resizes                       atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(4, 5))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rng.IntN(3500)) * time.Microsecond):
			}
			l := dispatch.Limits{Workers: workers(rng), QueueCapacity: rng.IntN(40)}
			hist.add(l.Workers)
			if err := d.Update(l); err != nil {
				t.Error(err)
				return
			}
			resizes.Add(1)
		}
	})
	for s := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(s), 6))
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(3) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
				}
				n0 := hist.n.Load()
				sleep := rng.IntN(4) == 0
				var once atomic.Bool
				err := d.Submit(ctx, func(context.Context) {
					if !once.CompareAndSwap(false, true) {
						twice.Add(1)
					}
					n, earliest := running.start(n0)
					if n > hist.maxSince(earliest) {
						violations.Add(1)
					}
					for hw := highWater.Load(); int64(n) > hw && !highWater.CompareAndSwap(hw, int64(n)); hw = highWater.Load() {
					}
					if sleep {
						time.Sleep(50 * time.Microsecond)
					}
					running.done(n0)
					ran.Add(1)
				})
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, dispatch.ErrQueueFull):
					refused.Add(1)
					time.Sleep(100 * time.Microsecond)
				case errors.Is(err, context.DeadlineExceeded):
					doneAtSubmit.Add(1)
				default:
					t.Errorf("Submit: %v", err)
				}
				defer cancel()
			}
		})
	}
	// At least duration, and on a loaded machine until every path has been
	// taken, for at most ten times as long.
	time.Sleep(duration)
	for end := time.Now().Add(9 * duration); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		st := d.Stats()
		if resizes.Load() >= 10 && refused.Load() > 0 && ran.Load() > 0 &&
			int64(st.Rejected[dispatch.ContextDone]) > doneAtSubmit.Load() {
			break
		}
	}
	close(stop)
	wg.Wait()
	final := dispatch.Limits{Workers: 4, QueueCapacity: 40}
	hist.add(final.Workers)
	if err := d.Update(final); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	st := d.Stats()
	droppedAfterAccept := int64(st.Rejected[dispatch.ContextDone]) - doneAtSubmit.Load()
	if got := ran.Load() + droppedAfterAccept; got != accepted.Load() {
		t.Errorf("accepted %d, but ran %d + dropped %d = %d", accepted.Load(), ran.Load(), droppedAfterAccept, got)
	}
	if int64(st.Completed) != ran.Load() || int64(st.Rejected[dispatch.QueueFull]) != refused.Load() {
		t.Errorf("Stats: completed %d, queue_full %d; callers saw %d, %d", st.Completed, st.Rejected[dispatch.QueueFull], ran.Load(), refused.Load())
	}
	if twice.Load() != 0 {
		t.Errorf("%d tasks ran twice", twice.Load())
	}
	if v := violations.Load(); v != 0 {
		t.Errorf("%d times more tasks ran at once than the workers in force allowed", v)
	}
	if st.Running != 0 || st.Queued != 0 {
		t.Errorf("after Shutdown: Running %d, Queued %d", st.Running, st.Queued)
	}
	eventually(t, "every goroutine exits", func() bool { return runtime.NumGoroutine() <= base })
	t.Logf("%d resizes: accepted %d, ran %d, dropped in queue %d, refused %d, high-water %d",
		resizes.Load(), accepted.Load(), ran.Load(), droppedAfterAccept, refused.Load(), highWater.Load())
	if ran.Load() == 0 || refused.Load() == 0 || droppedAfterAccept == 0 || resizes.Load() < 10 {
		t.Error("the stress did not exercise every path")
	}
}
