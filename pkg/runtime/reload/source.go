package reload

import (
	"context"
	"errors"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
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
}

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

// plans returns the plans in force.
func (c *core) plans() map[string]plan.Document { return c.tracker.plansCopy() }
