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
	a, err := newAcker(opts.Ack, client, log, m)
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
	return nil
}

// plans returns the plans in force.
func (c *core) plans() map[string]plan.Document { return c.tracker.plansCopy() }
