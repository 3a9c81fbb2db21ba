// Package gate enforces one per-pod share of a downstream's capacity: a token
// bucket (rate), then a waiting room (a bounded FIFO with a maximum wait),
// then permits (an in-flight semaphore). A call passes the layers in that
// order and is either admitted, holding a permit until it ends, or rejected
// at once with a reason.
//
// # Admission
//
// Acquire checks, in order:
//
//   - Closed: the gate was closed.
//   - DeadlineTooShort: the context's remaining time is below
//     Limits.TypicalLatency; a call that cannot finish is shed before it
//     costs anything.
//   - RateLimited: the token bucket (golang.org/x/time/rate) has no token.
//     The rate layer never waits; the rejection carries RetryAfter, the time
//     until the next token. A token taken by a call that a later layer
//     rejects is not given back: the bucket limits the calls that reach the
//     waiting room.
//   - Permits: if a permit is free and nobody waits, the call is admitted.
//   - QueueFull: otherwise, if the waiting room is at capacity.
//   - The call waits in FIFO order. It is admitted when a permit is freed or
//     the limit grows and it is at the front; it leaves with WaitTimeout
//     after MaxQueueWait or AcquireTimeout, with DeadlineTooShort when
//     waiting longer would leave less than TypicalLatency before the
//     context's deadline, or with ctx.Err() when the context ends.
//
// Nobody barges: while anyone waits, a newcomer queues behind them even if
// it arrives just as a permit is freed, because Release hands the permit to
// the first waiter itself.
//
// Every rejection is a *Rejection carrying its Reason, the gate's name and a
// RetryAfter hint where one is known; errors.Is matches ErrRejected and the
// reason's sentinel (ErrQueueFull, ...). Rejections are local: retry helpers
// recognise them through their LocalRejection method and never retry them.
//
// # Resizing
//
// Update puts new Limits in force atomically with respect to admissions: an
// admission happens only while in-flight is below the limit in force at that
// instant. A larger limit admits waiters at once; a smaller one never
// pre-empts calls in flight and admits nobody until in-flight is below it. A
// smaller waiting room keeps everyone already queued and refuses newcomers
// until it has room. This is how the in-flight limit follows the replica
// count while calls run.
//
// # Borrowing
//
// A gate may be given a Lender (SetLender): the permits of a reserve that
// the operator pools over the pods, lent per call by a permit server
// (package reserve). A call with a deadline that finds every permit of
// the gate taken borrows one: while it waits in the waiting room, taking
// whichever permit comes first; or, when the room has no place for it,
// waiting for a lent permit alone as long as the room would have kept it.
// A lent permit is released like any other (Release gives it back to the
// Lender) and is not counted in InFlight: the gate's own permits, its
// share, are what it acknowledges. A Lender that is unreachable or slow
// keeps a call no longer than the waiting room would, and its budget,
// and only when the call would otherwise wait or be shed. The fast path
// does not look at the Lender.
//
// # Lending out
//
// The other way round, a gate may lend one of its own permits, idle here,
// to a call of another pod (LendOut): the permit server asks for one when
// its reserve is lent out, through the gate's Offerer. Only a permit that
// nothing of the gate's wants is lent: none while a call waits in the
// waiting room or a loan waits to move, and never the last keep free. A
// permit lent out is one of the gate's: it counts in InFlight (not in
// Admitted), so a smaller limit waits for it as for a call, and its
// release serves a waiter like any other. Spare says how many LendOut
// could lend now. Neither looks at the Lender, and the fast path does not
// look at them.
//
// # Permits and speed
//
// Acquire returns a Permit value rather than the release function a
// semaphore API often returns. A closure allocates, and the uncontended
// Acquire and Release must not: together they are two atomic adds on one
// word that holds the in-flight count, the limit, an admission counter and
// the flags, and Release is small enough to be inlined. Permit.Release is
// idempotent: it clears the Permit, so a second call is a no-op, never a
// double release; go vet's copylocks check reports copies of a Permit, which
// would defeat that. Do wraps Acquire and Release around a function, and
// Permit.ReleaseFunc turns a permit into a release function that is safe to
// call from several goroutines, where that is worth an allocation. The
// waiting room, the token bucket and the deadline check run on a slower path
// only when they apply: a configured rate or a call with a deadline and a
// TypicalLatency reads the clock, and waiting takes a mutex.
//
// # Time
//
// Time-sensitive methods have forms that take the time (TryAcquireAt,
// UpdateAt), in the style of x/time/rate, so that tests step a clock instead
// of sleeping. Waits in the waiting room use real timers.
//
// # Metrics
//
// The gate keeps its own counters (Stats): in-flight, queue depth, limits,
// admissions, rejections by reason, and a histogram of the time spent in the
// waiting room by the calls that waited there. The hot path updates nothing
// but the admission word; collectors read Stats at scrape time, so this
// package does not depend on Prometheus (package runtime registers the
// collectors that read it).
package gate
