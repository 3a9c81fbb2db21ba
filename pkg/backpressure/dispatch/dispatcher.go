package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/fifo"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/histogram"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/queuewait"
)

// Dispatcher is a bounded worker pool: at most Limits.Workers worker
// goroutines, started as tasks need them, and a bounded FIFO queue of tasks
// waiting for one. See the package documentation for the guarantees.
//
// A Dispatcher must be made with New; the zero value is not usable. It is
// safe for concurrent use by multiple goroutines.
type Dispatcher struct {
	// name and epoch are fixed at New; epoch is the origin of the monotonic
	// clock that stamps queued tasks.
	name  string
	epoch time.Time

	rejected  [numReasons]atomic.Uint64
	completed atomic.Uint64
	waits     histogram.Histogram

	mu      sync.Mutex
	limits  Limits               // guarded by mu
	queue   fifo.List[taskState] // guarded by mu
	idle    []*worker            // guarded by mu; parked workers, most recent last
	running int                  // guarded by mu; worker goroutines started that have not decided to exit
	closing bool                 // guarded by mu
	done    chan struct{}
	isDone  bool // guarded by mu; done is closed
}

// worker is one worker goroutine's mailbox, used while it is parked.
type worker struct {
	// ch receives one job: a task handed over by Submit, or a zero job
	// telling the worker to exit. It has room for it, so senders never block.
	ch chan job
}

type job struct {
	ctx context.Context
	fn  func(context.Context)
}

// New returns a dispatcher named name (the dispatcher label of its metrics)
// with the limits l. It starts no goroutine: workers start as tasks arrive
// (see Submit), so a large l.Workers costs nothing until the load needs it.
func New(name string, l Limits) (*Dispatcher, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Dispatcher{name: name, epoch: time.Now(), limits: l, done: make(chan struct{})}, nil
}

// Name returns the dispatcher's name.
func (d *Dispatcher) Name() string { return d.name }

// Submit hands fn to a worker, which calls it with ctx, and returns without
// waiting for it: to an idle worker if there is one, else to a worker it
// starts if fewer than Limits.Workers run. If every worker allowed is busy,
// the task waits in the queue; if the queue is full too, or Shutdown was
// called, Submit returns a *Rejection and fn never runs. A task is never run on the caller's
// goroutine and never dropped without being counted: if ctx ends while the
// task is queued, it leaves the queue and is counted as ContextDone. If ctx
// has already ended, Submit returns ctx.Err().
//
// Queuing a task whose context can end allocates, to watch the context;
// handing one to an idle worker does not.
func (d *Dispatcher) Submit(ctx context.Context, fn func(context.Context)) error {
	if err := ctx.Err(); err != nil {
		d.rejected[ContextDone].Add(1)
		return err
	}
	d.mu.Lock()
	if d.closing {
		d.mu.Unlock()
		return d.reject(Closed)
	}
	if n := len(d.idle); n > 0 {
		w := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		w.ch <- job{ctx: ctx, fn: fn}
		return nil
	}
	if d.running < d.limits.Workers && d.queue.Len() == 0 {
		// No worker is idle and one more is allowed: start it with fn.
		d.running++
		d.mu.Unlock()
		go d.work(&worker{ch: make(chan job, 1)}, job{ctx: ctx, fn: fn})
		return nil
	}
	// Tasks are queued only while the workers allowed are all busy, or
	// just after Update raised the limit and started workers for them: fn
	// goes behind them, with a worker of its own if the limit allows one
	// (then it waits for no busy worker, so the queue's capacity does not
	// apply).
	if d.running < d.limits.Workers {
		d.running++
		go d.work(&worker{ch: make(chan job, 1)}, job{})
	} else if d.queue.Len() >= d.limits.QueueCapacity {
		d.mu.Unlock()
		return d.reject(QueueFull)
	}
	t := d.queue.New()
	t.Value.ctx, t.Value.fn, t.Value.enqueued = ctx, fn, d.now()
	if ctx.Done() != nil {
		gen := t.Value.gen
		t.Value.stop = context.AfterFunc(ctx, func() { d.expire(t, gen) })
	}
	d.queue.PushBack(t)
	d.mu.Unlock()
	return nil
}

func (d *Dispatcher) reject(r Reason) error {
	d.rejected[r].Add(1)
	return &Rejection{Reason: r, Dispatcher: d.name}
}

func (d *Dispatcher) now() int64 { return int64(time.Since(d.epoch)) }

// expire takes t out of the queue when its context ends, unless a worker
// took it first (then t.Value.gen has moved on).
func (d *Dispatcher) expire(t *task, gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.Value.gen != gen {
		return
	}
	d.queue.Remove(t)
	d.recycleLocked(t)
	d.rejected[ContextDone].Add(1)
	d.checkDoneLocked()
}

// spawnLocked starts as many workers as the queued tasks need, within the
// limit; each takes its first task from the queue.
func (d *Dispatcher) spawnLocked() {
	for n := min(d.limits.Workers-d.running, d.queue.Len()); n > 0; n-- {
		d.running++
		go d.work(&worker{ch: make(chan job, 1)}, job{})
	}
}

// work runs j, unless it is the zero job, then every job next gives w.
// A worker stays parked while idle rather than exiting after a while: it
// costs a few kilobytes of stack, it is at most the peak number of tasks
// that ran at once, and a worker that is already there takes the next task
// without starting a goroutine, which keeps Submit as fast as a fixed pool.
func (d *Dispatcher) work(w *worker, j job) {
	for ; ; j = (job{}) {
		if j.fn == nil {
			var ok bool
			if j, ok = d.next(w); !ok {
				return
			}
		}
		if j.ctx.Err() != nil {
			// Its context ended between Submit and now: the caller has
			// given up on it.
			d.rejected[ContextDone].Add(1)
			continue
		}
		j.fn(j.ctx)
		d.completed.Add(1)
	}
}

// next returns w's next job: the front of the queue if any, else whatever is
// handed to w once it has parked. It reports false when w must exit.
func (d *Dispatcher) next(w *worker) (job, bool) {
	d.mu.Lock()
	if d.running > d.limits.Workers || (d.closing && d.queue.Len() == 0) {
		// Shrinking by attrition, or drained after Shutdown.
		d.running--
		d.checkDoneLocked()
		d.mu.Unlock()
		return job{}, false
	}
	if t := d.queue.Front(); t != nil {
		d.queue.Remove(t)
		j := job{ctx: t.Value.ctx, fn: t.Value.fn}
		enqueued, stop := t.Value.enqueued, t.Value.stop
		d.recycleLocked(t)
		d.mu.Unlock()
		if stop != nil {
			stop()
		}
		d.waits.Observe(time.Duration(d.now() - enqueued))
		return j, true
	}
	// Workers park only while the queue is empty, and Submit hands work to
	// parked workers before it queues anything: so a queued task always
	// means every worker is busy.
	d.idle = append(d.idle, w)
	d.mu.Unlock()
	j := <-w.ch
	return j, j.fn != nil
}

// stopIdleLocked tells parked workers to exit while there are more workers
// than want.
func (d *Dispatcher) stopIdleLocked(want int) {
	for d.running > want && len(d.idle) > 0 {
		n := len(d.idle)
		w := d.idle[n-1]
		d.idle[n-1] = nil
		d.idle = d.idle[:n-1]
		d.running--
		w.ch <- job{}
	}
}

func (d *Dispatcher) checkDoneLocked() {
	if d.closing && d.running == 0 && d.queue.Len() == 0 && !d.isDone {
		d.isDone = true
		close(d.done)
	}
}

// Update resizes the dispatcher. A larger limit starts at once as many
// workers as there are queued tasks, within the limit; fewer workers means idle ones exit now and busy ones after their
// current task, never interrupting it. A smaller queue keeps the tasks
// already queued and refuses new ones until it has room. Update returns an
// error, and changes nothing, if l is invalid or Shutdown was called.
func (d *Dispatcher) Update(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return &Rejection{Reason: Closed, Dispatcher: d.name}
	}
	d.limits = l
	d.stopIdleLocked(l.Workers)
	d.spawnLocked()
	return nil
}

// Shutdown stops accepting tasks (Submit returns Closed), lets the workers
// run every queued task, and returns nil once they have and every worker has
// exited. If ctx ends first, the tasks still queued are dropped and counted
// as Shutdown, tasks already running are left to finish, and Shutdown
// returns ctx.Err(). Shutdown may be called more than once.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	if !d.closing {
		d.closing = true
		// Parked workers exist only while the queue is empty: nothing is
		// left for them.
		d.stopIdleLocked(0)
		d.checkDoneLocked()
	}
	d.mu.Unlock()

	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
	}
	d.mu.Lock()
	for t := d.queue.Front(); t != nil; t = d.queue.Front() {
		d.queue.Remove(t)
		if t.Value.stop != nil {
			t.Value.stop()
		}
		d.recycleLocked(t)
		d.rejected[Shutdown].Add(1)
	}
	d.checkDoneLocked()
	d.mu.Unlock()
	return ctx.Err()
}

// Stats is a snapshot of a dispatcher's counters, read at scrape time.
type Stats struct {
	// Limits are the limits in force.
	Limits Limits
	// Running is the number of worker goroutines; it exceeds Limits.Workers
	// while a shrink waits for busy workers to finish.
	Running int
	// Active is the number of workers not parked idle.
	Active int
	// Queued is the number of tasks waiting for a worker.
	Queued int
	// Completed counts tasks that ran to completion.
	Completed uint64
	// Rejected counts refused and dropped tasks by reason; every Reason has
	// an entry.
	Rejected map[Reason]uint64
	// QueueWait holds the time queued tasks waited for a worker. Tasks handed
	// straight to an idle worker are not in it.
	QueueWait queuewait.Snapshot
}

// Stats returns the dispatcher's counters. It takes the dispatcher's mutex
// briefly, so it is meant for scrapes.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	st := Stats{
		Limits:  d.limits,
		Running: d.running,
		Active:  d.running - len(d.idle),
		Queued:  d.queue.Len(),
	}
	d.mu.Unlock()
	st.Completed = d.completed.Load()
	st.Rejected = make(map[Reason]uint64, len(Reasons))
	for _, r := range Reasons {
		st.Rejected[r] = d.rejected[r].Load()
	}
	st.QueueWait = d.waits.Snapshot()
	return st
}
