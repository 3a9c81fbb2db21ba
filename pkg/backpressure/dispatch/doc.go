// Package dispatch holds the dispatcher: a bounded worker pool with at most a
// given number of workers and a bounded FIFO queue in front of them.
//
// A worker pool limits workers, not in-flight calls to a downstream (that is
// the gate's job); use a dispatcher to bound the goroutines and the backlog
// of work a process takes on, sized by Little's law (workers = demand ×
// latency) and by how long a task may usefully wait.
//
// The policy on overload is abort-and-count: Submit never blocks, never runs
// a task on the caller's goroutine (which would turn overload into latency
// for the caller), and never drops a task silently. A task is either run by a
// worker, refused by Submit with a *Rejection (QueueFull, Closed), or, once
// accepted, dropped and counted: when its context ends while it is queued
// (ContextDone; it leaves the queue at once and frees its slot) or when
// Shutdown gives up (Shutdown).
//
// Workers start lazily: Submit hands a task straight to an idle worker if
// there is one, else starts a worker for it while fewer than the limit run,
// and queues it only when every worker allowed is busy. So the queue holds
// only tasks that no worker is free for, QueueCapacity is exactly the
// backlog allowed, and the goroutines a dispatcher has never exceed the
// most tasks that ran at once: a limit of a million workers with three
// tasks starts three. Idle workers stay parked for the next task. Update
// resizes workers and queue while tasks run: a larger limit starts workers
// for the tasks queued, surplus workers exit when idle (never in the middle
// of a task), and a smaller queue keeps what it holds. Shutdown
// drains the queue and waits for the workers, up to its context.
//
// A task that panics crashes the program, as a panic on any goroutine does;
// the dispatcher does not hide it.
//
// Stats, read at scrape time by the runtime's collectors, reports workers, active
// workers, queue depth, completions, refusals and drops by reason, and a
// histogram of the time queued tasks waited for a worker.
package dispatch
