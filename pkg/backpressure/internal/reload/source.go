package reload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Options configure either source.
type Options struct {
	// Subscriber receives the updates; required.
	Subscriber Subscriber
	// Logger receives the source's logs; the zero value discards them.
	Logger logr.Logger
	// Registerer registers the backpressure_config_* metrics; nil registers
	// nothing. Sources given the same registerer share the metrics.
	Registerer prometheus.Registerer
	// Ack turns acknowledgement on when not nil; see AckOptions.
	Ack *AckOptions
	// Enforced, when not nil, holds back the acknowledgement of each plan
	// until it is enforced. It is called on a goroutine of its own with the
	// full document of every new epoch or revision of a gate, after the
	// subscriber has been given it, and must block until the pod enforces
	// that revision and its calls in flight on the gate are within the
	// permits the revision gives the pod, then return nil; or return
	// ctx.Err() once ctx ends, which it does when a newer revision of the
	// gate supersedes d or the source stops. Nil acknowledges each plan as
	// soon as the subscriber has returned, which is right only for a
	// subscriber that has nothing in flight. A Runtime sets it.
	Enforced func(ctx context.Context, d plan.Document) error
	// WaitForPlan, when positive, lets NewDirSource and NewConfigMapSource
	// return a source that holds no plan yet, instead of failing: they read
	// the source again, backing off, until it holds a valid plan or
	// WaitForPlan has passed, and then return it as it is. A source that
	// could not be read or held no plan by then says so in its log, and its
	// Start delivers the first valid plans as soon as they appear. Zero
	// fails at once, as a source always did. A Runtime sets it when the
	// application gives a bootstrap plan.
	WaitForPlan time.Duration
}

// Bounds of the pause between two first reads while WaitForPlan runs.
const (
	firstRetryDelay = 50 * time.Millisecond
	maxRetryDelay   = time.Second
)

// errStarted is returned by a second Start.
var errStarted = errors.New("reload: source already started")

// core is what both sources share: the tracker, the subscriber, the acker,
// and the ordering of deliveries.
type core struct {
	tracker    *tracker
	subscriber Subscriber
	acker      *acker
	log        logr.Logger

	startOnce sync.Once
	deliverMu sync.Mutex
}

func newCore(opts Options, client kubernetes.Interface) (*core, error) {
	if opts.Subscriber == nil {
		return nil, errors.New("reload: Options.Subscriber is required")
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	a, err := newAcker(opts.Ack, opts.Enforced, client, log, m)
	if err != nil {
		return nil, err
	}
	return &core{tracker: newTracker(log, m), subscriber: opts.Subscriber, acker: a, log: log}, nil
}

// readFirst fills the tracker with what read returns, the source's first
// snapshot. With wait zero it returns read's error, or an error matching
// ErrNoPlan naming what (the source) when the snapshot holds no valid
// plan. With wait positive it reads again, backing off, until the source
// holds a plan or wait has passed (each read is bounded by that deadline),
// and then returns nil either way; only ctx ending first is an error. A
// distinct failure is counted and logged once however often it recurs.
func (c *core) readFirst(ctx context.Context, wait time.Duration, what string,
	read func(context.Context) (map[string]entry, error)) error {
	deadline := time.Now().Add(wait)
	delay := firstRetryDelay
	for {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if wait > 0 {
			rctx, cancel = context.WithDeadline(ctx, deadline)
		}
		snap, err := read(rctx)
		cancel()
		if err == nil {
			_, _, rejected := c.tracker.apply(snap)
			if len(c.tracker.plansCopy()) > 0 {
				return nil
			}
			err = initialError(what, rejected)
		}
		if wait <= 0 {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("reload: waiting for a plan in %s: %w", what, ctx.Err())
		}
		if !errors.Is(err, ErrNoPlan) {
			c.tracker.sourceFailed(err)
		}
		remaining := time.Until(deadline)
		if remaining <= 0 {
			c.log.Info("No valid plan within the wait; starting without one, the first to appear is delivered",
				"waited", wait, "reason", err.Error())
			return nil
		}
		t := time.NewTimer(min(delay, remaining))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("reload: waiting for a plan in %s: %w", what, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// load applies a snapshot and delivers the update it makes, if any.
func (c *core) load(snapshot map[string]entry) {
	c.deliverMu.Lock()
	defer c.deliverMu.Unlock()
	if u, ok, _ := c.tracker.apply(snapshot); ok {
		c.deliverLocked(u)
	}
}

func (c *core) deliverLocked(u Update) {
	plans := u.Plans
	c.subscriber(u.clone())
	if c.acker != nil {
		c.acker.set(plans)
	}
}

// start runs fn, the source's watch loop, after delivering the plans read so
// far, with the acker beside it; it returns when ctx ends and both have
// stopped.
func (c *core) start(ctx context.Context, fn func(context.Context)) error {
	first := false
	c.startOnce.Do(func() { first = true })
	if !first {
		return errStarted
	}
	ctx = logr.NewContext(ctx, c.log)
	var wg sync.WaitGroup
	if c.acker != nil {
		wg.Go(func() { c.acker.run(ctx) })
	}
	c.deliverMu.Lock()
	c.deliverLocked(c.tracker.current())
	c.deliverMu.Unlock()
	fn(ctx)
	wg.Wait()
	if c.acker != nil {
		c.acker.stop()
	}
	return nil
}

// Release tells the operator that this pod has handed back its share of
// each gate in gates: it annotates the pod with
// applied.backpressure.dev/<gate>: "<epoch>/released" (see plan.Ack), the
// epoch being that of the gate's plan in force, and from then on
// acknowledges no revision. Call it only after Start has returned, once the
// gates are closed for good and nothing is in flight on them; a Runtime
// does so when its Start ends. A failed patch is retried with backoff until
// ctx ends; Release then returns the last error. Without acknowledgement
// (see AckOptions) it does nothing and returns nil.
func (c *core) Release(ctx context.Context, gates []string) error {
	if c.acker == nil {
		return nil
	}
	return c.acker.release(ctx, c.tracker.plansCopy(), gates)
}

// Acknowledged reports whether the operator waits for this pod's
// acknowledgement before it takes the gate's smaller shares of epoch as
// applied: acknowledgement is on, this source has acknowledged a revision
// of epoch for the gate, and the pod does not declare
// backpressure.dev/acknowledges: "false". Until then the operator may
// settle a smaller share by time, as for a pod that does not acknowledge.
func (c *core) Acknowledged(gate, epoch string) bool {
	return c.acker != nil && c.acker.acknowledged(gate, epoch)
}

// plans returns the plans in force.
func (c *core) plans() map[string]plan.Document { return c.tracker.plansCopy() }
