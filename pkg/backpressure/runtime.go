package backpressure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// Options configure a Runtime. The zero value is valid: no gate is required,
// nothing is logged, no metric is registered.
type Options struct {
	// Gates names the gates the service uses. New fails unless the source
	// holds a valid plan for each of them, or Bootstrap gives one, so a pod
	// that would otherwise start with a gate it cannot enforce fails at
	// once instead.
	Gates []string
	// Dispatchers names the gates that also get a dispatcher, sized by the
	// plan's workers and queue capacity (see Share.Workers). Each is
	// required like the names in Gates.
	Dispatchers []string
	// Registerer registers the backpressure_gate_*, backpressure_retry_*,
	// backpressure_dispatcher_* and backpressure_config_* metrics; nil
	// registers nothing. The global registry is never used.
	Registerer prometheus.Registerer
	// Logger receives the logs of the Runtime and its source; the zero value
	// discards them. Every plan put in force is logged at level 0 as
	// "Applied plan" with the keys gate, hash and permits, and so is every
	// lapse of the plan's source and its end (see SourceLapseMargin), with
	// the permits then in force.
	Logger logr.Logger
	// PodName names this pod: it picks the pod's own share out of each
	// published plan, and with Ack it is the pod that is annotated. Empty
	// means the environment variable POD_NAME, set from the downward API
	// (fieldRef metadata.name); a pod whose name is unknown, or that a plan
	// does not name, enforces the plan's base share.
	PodName string
	// PodNamespace is this pod's namespace, for Ack. Empty means the
	// environment variable POD_NAMESPACE (fieldRef metadata.namespace).
	PodNamespace string
	// Ack, when not nil, turns on acknowledgement: the pod is annotated with
	// applied.backpressure.dev/<gate>: "<epoch>/<revision>" once it
	// enforces that revision and its calls in flight on the gate are within
	// the permits the revision gives it (at once for a share that does not
	// shrink), and with "<epoch>/released" when Start ends (see Start and
	// AckOptions).
	Ack *AckOptions
	// DrainTimeout bounds how long Start, once its context has ended, waits
	// for the calls in flight on the closed gates to finish; zero means 30
	// seconds. A gate that still has calls in flight then is not released.
	DrainTimeout time.Duration
	// ReleaseTimeout bounds how long Start then tries to write the
	// "<epoch>/released" acknowledgements; zero means 10 seconds.
	ReleaseTimeout time.Duration
	// OnApplied, when not nil, is called every time a plan is put in force
	// on a gate, the first one included, after the gate, its retry budget
	// and its dispatcher have it. It runs on the source's goroutine (on
	// New's for the first plans) and must not block: the next reload waits
	// for it. A lapse of the plan's source and its end put no plan in force
	// and are not reported.
	OnApplied func(Applied)
	// Bootstrap, when not empty, lets the pod start without the operator:
	// New waits up to BootstrapWait for the source to hold a published
	// plan, and every gate that has none by then enforces its share here
	// instead, until the source delivers the gate's published plan,
	// which replaces it for good. A pod on a bootstrap share says so: the
	// gauge backpressure_config_gate_bootstrap is 1 for the gate, New logs
	// it, and it acknowledges nothing to the operator (Options.Ack) until
	// the published plan is in force.
	//
	// Each is this pod's conservative share of one gate: Gate,
	// Limits, Workers, RetryBudgetPerSecond and Deadline within the bounds
	// a published plan obeys (docs/reference/plan-bounds.md), Epoch and
	// Revision unset, Hash computed when empty. The usual share is the
	// downstream's contract divided by the workload's maximum replicas
	// (HPA maxReplicas), which no number of pods can exceed;
	// `kubectl backpressure plan` prints it as the bootstrap share.
	// Without Bootstrap, New fails when the source holds no plan.
	Bootstrap []Share
	// BootstrapWait bounds how long New waits for a published plan before
	// it starts on Bootstrap; zero means DefaultBootstrapWait. Ignored
	// without Bootstrap.
	BootstrapWait time.Duration
	// Lender, when not nil, gives each gate, as it is made, the Lender of
	// its downstream's reserve: the pod borrows a permit of the reserve
	// when its own share is full (gate.Gate.SetLender says when). The
	// permit server's is package reserve's Client.Lender. A nil Lender
	// returned for a gate leaves that gate without one.
	Lender func(gate string) gate.Lender
	// LendRules are the rules each gate with a Lender borrows by
	// (gate.LendRules: return a loan as soon as the pod has a permit of its
	// own for its call; ask the Lender only after a wait in the waiting
	// room). The zero value borrows by gate.Gate.SetLender's rule alone.
	LendRules gate.LendRules
	// Offer, when not nil, is called for each gate as the Runtime makes
	// it, with the gate's Offerer: the side of the gate the permit server
	// asks for one of this pod's own permits, idle here, to lend to
	// another pod's call when the reserve is lent out (package reserve's
	// Client.Offer follows the server's asks, in a goroutine of its own).
	// The Offerer lends by gate.Gate.LendOut, keeping OfferKeep, and
	// refuses while the gate has lapsed (see SourceLapseMargin), while it
	// enforces a bootstrap plan, which the operator never counted, and an
	// ask whose lease a lapse could outlive. A permit lent out counts in
	// the gate's calls in flight, so a shrink is acknowledged, and a gate
	// released, only once it is back. Offer runs on the goroutine that
	// makes the gate (New's, or the source's) and must not block. The stop
	// it returns, nil for none, is called when the gate is dropped or the
	// Runtime stops (Start's end, Shutdown); the Offerer refuses from then
	// on, and permits lent out already are held until their release.
	Offer func(gate string, o gate.Offerer) (stop func())
	// OfferKeep is how many permits of its own each gate keeps free for
	// its calls when the permit server asks for one (see Offer): a gate
	// lends only while more than OfferKeep are free. Zero keeps none;
	// negative is an error.
	OfferKeep int
	// SourceLapseMargin is how much sooner than the operator's
	// unacknowledged delay (the plan's UnacknowledgedDelaySeconds), less
	// the plan's deadline, a gate lapses once its source has stopped
	// confirming its plan; zero means DefaultSourceLapseMargin, negative is
	// an error. A gate that lapses enforces a share of 0 (it admits
	// nothing, as for a published 0) until the source confirms a plan
	// again, because the operator hands the share of a pod that does not
	// acknowledge to others once that delay has passed since it published
	// a smaller one, which this pod may not have read. The gauge
	// backpressure_plan_source_lapsed says so. Only a source that knows
	// when it is current lapses (FromConfigMap; not FromDir), only for a
	// plan that carries the delay, and never while the operator waits for
	// this pod's acknowledgement (see Options.Ack).
	//
	// A smaller margin than the default keeps the share longer but risks
	// enforcing it after the operator has given it away: it must cover
	// the time a dead connection goes unnoticed (a watch stays open until
	// the client's HTTP/2 health check ends it, 45s by default) and the
	// watch's delivery.
	SourceLapseMargin time.Duration
	// Held, when not nil, counts the permits of a gate this pod holds
	// outside the gate's own calls in flight: the leases a permit server
	// (backpressure-broker) has lent of its slice of a reserve, whose
	// share the plan gives it like a pod's. The Runtime adds the count to
	// the gate's calls in flight wherever it decides whether the pod is
	// within a share: a revision is acknowledged only once both together
	// are within its permits, and Start releases a gate only once both
	// are 0. A negative count says the pod cannot know what it holds (a
	// permit server that started less than its longest lease ago may have
	// lent in an earlier run): nothing is acknowledged or released while
	// it says so. Held is called every pollInterval while a revision or a
	// release waits, must be cheap, and must count only permits lent
	// within the limit the gate enforces at the time of the call.
	Held func(gate string) int
}

// Defaults of Options.
const (
	// DefaultBootstrapWait is Options.BootstrapWait's default: long enough
	// for an API server that answers, or for an operator that is creating
	// the workload's ConfigMap, short enough not to hold a rollout back.
	DefaultBootstrapWait = 5 * time.Second
	// DefaultDrainTimeout is Options.DrainTimeout's default.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultReleaseTimeout is Options.ReleaseTimeout's default.
	DefaultReleaseTimeout = 10 * time.Second
	// DefaultSourceLapseMargin is Options.SourceLapseMargin's default:
	// the 45s a watch on a dead connection may stay open (client-go's
	// HTTP/2 health check: a ping after 30s without a frame, answered
	// within 15s) and 5s for the watch's delivery to the gates and the
	// lapse's check, which runs every lapseCheckInterval. The operator's
	// count starts no sooner than the publication the pod may have
	// missed, and each side measures the delay on its own clock, so their
	// skew does not enter; only their rates, negligible, do.
	DefaultSourceLapseMargin = 50 * time.Second
)

// lapseCheckInterval paces the check of the plan source's confirmations.
const lapseCheckInterval = 100 * time.Millisecond

// pollInterval paces the watch of a gate's calls in flight while a smaller
// share waits to be acknowledged, and while a closed gate drains. Reading
// the count is one atomic load, so polling keeps Acquire and Release free of
// any notification; 10ms is well below the time an operator takes to act on
// an acknowledgement.
const pollInterval = 10 * time.Millisecond

// Applied describes a plan just put in force on a gate.
type Applied struct {
	// Share is the share now in force: this pod's share of the published
	// plan, or a bootstrap share (see Options.Bootstrap; its Epoch is
	// empty).
	Share Share
	// At is when the plan was put in force.
	At time.Time
}

// Runtime enforces the plans of one source: it keeps a gate and a retry
// budget (and, where asked, a dispatcher) for every gate the source has a
// plan for, sized by this pod's share of the plan, and resizes them in
// place on every reload. Gates, budgets and dispatchers are made once and
// never replaced, so a caller may keep the pointers. A gate whose document
// disappears from the source keeps its last plan
// (backpressure_config_gate_orphaned says so).
//
// A Runtime is safe for concurrent use by multiple goroutines.
type Runtime struct {
	src            reload.Source
	log            logr.Logger
	metrics        *collectors
	onApplied      func(Applied)
	dispatched     map[string]bool // gates that get a dispatcher; read-only after New
	lender         func(string) gate.Lender
	lendRules      gate.LendRules
	offer          func(string, gate.Offerer) func() // Options.Offer
	offerKeep      int
	held           func(string) int // Options.Held; nil: nothing held outside the gates
	pod            string           // this pod's name, "" when unknown
	namespace      string           // this pod's namespace, "" when unknown
	drainTimeout   time.Duration
	releaseTimeout time.Duration
	lapseMargin    time.Duration
	started        atomic.Bool

	mu    sync.RWMutex
	gates map[string]*enforcer // guarded by mu
	// claims hold, from Start on, each gate's claim to be this pod's only
	// enforcer of it (claimGate); guarded by mu.
	claims map[string]io.Closer
	// offersStopped is set once the gates offer no more permits
	// (stopOffers); guarded by mu.
	offersStopped bool
	// confirmedLive and confirmedAt are the source's confirmation as the
	// lapses were last checked against it (see mayLendLocked); guarded by
	// mu.
	confirmedLive bool
	confirmedAt   time.Time
}

// enforcer is what the Runtime keeps for one gate.
type enforcer struct {
	gate       *gate.Gate
	budget     *retry.Budget
	dispatcher *dispatch.Dispatcher // nil unless the gate is in Options.Dispatchers
	plan       plan.Document        // the plan in force
	bootstrap  bool                 // plan is Options.Bootstrap's, not a published one
	// lapsed is set while the source has not confirmed plan for too long:
	// the gate enforces a share of 0 (see Options.SourceLapseMargin).
	lapsed bool
	// stopOffer is what Options.Offer returned for the gate; nil for
	// none, or once called.
	stopOffer func()
}

// New opens src and puts its plans in force, each as this pod's share of it
// (see Options.PodName). It fails when the source has no valid plan at all
// (the error matches ErrNoPlan), when it has none for a gate named in
// Options.Gates or Options.Dispatchers (matches ErrNoPlan too), or
// when metrics cannot be registered. New reads the source once; Start
// follows its changes.
//
// With Options.Bootstrap, New reads the source until it holds a plan or
// Options.BootstrapWait has passed, then puts the bootstrap plan in force
// on every gate that has no published one; only a gate named in
// Options.Gates or Options.Dispatchers with neither fails.
func New(ctx context.Context, src Source, opts Options) (*Runtime, error) {
	if src.open == nil {
		return nil, errNoSource
	}
	boot, err := bootstrapPlans(opts.Bootstrap)
	if err != nil {
		return nil, err
	}
	if opts.SourceLapseMargin < 0 {
		return nil, fmt.Errorf("backpressure: Options.SourceLapseMargin %v must not be negative", opts.SourceLapseMargin)
	}
	if opts.BootstrapWait < 0 {
		return nil, fmt.Errorf("backpressure: Options.BootstrapWait %v must not be negative", opts.BootstrapWait)
	}
	if err := opts.LendRules.Validate(); err != nil {
		return nil, fmt.Errorf("backpressure: Options.LendRules: %w", err)
	}
	if opts.OfferKeep < 0 {
		return nil, fmt.Errorf("backpressure: Options.OfferKeep %d must not be negative", opts.OfferKeep)
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	m, err := newCollectors(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("backpressure: register metrics: %w", err)
	}
	r := &Runtime{
		log:            log,
		metrics:        m,
		onApplied:      opts.OnApplied,
		dispatched:     map[string]bool{},
		lender:         opts.Lender,
		lendRules:      opts.LendRules,
		offer:          opts.Offer,
		offerKeep:      opts.OfferKeep,
		held:           opts.Held,
		gates:          map[string]*enforcer{},
		drainTimeout:   cmp.Or(opts.DrainTimeout, DefaultDrainTimeout),
		releaseTimeout: cmp.Or(opts.ReleaseTimeout, DefaultReleaseTimeout),
		lapseMargin:    cmp.Or(opts.SourceLapseMargin, DefaultSourceLapseMargin),
	}
	for _, name := range opts.Dispatchers {
		r.dispatched[name] = true
	}
	var ack *reload.AckOptions
	r.pod, ack = podIdentity(opts)
	r.namespace = cmp.Or(opts.PodNamespace, os.Getenv(reload.EnvPodNamespace))

	wait := time.Duration(0)
	if len(boot) > 0 {
		wait = cmp.Or(opts.BootstrapWait, DefaultBootstrapWait)
	}
	r.src, err = src.open(ctx, reload.Options{
		Subscriber:  r.apply,
		Logger:      opts.Logger,
		Registerer:  opts.Registerer,
		Ack:         ack,
		Enforced:    r.enforced,
		WaitForPlan: wait,
	})
	if err != nil {
		return nil, fmt.Errorf("backpressure: %w", sourceError(err))
	}
	r.confirmedLive, r.confirmedAt = initialConfirmation(r.src)
	plans := r.src.Plans()
	for _, name := range slices.Concat(opts.Gates, opts.Dispatchers) {
		if _, ok := plans[name]; ok {
			continue
		}
		if _, ok := boot[name]; ok {
			continue
		}
		err := fmt.Errorf("%w for gate %q; the source holds plans for %q",
			ErrNoPlan, name, slices.Sorted(maps.Keys(plans)))
		if len(boot) > 0 {
			err = fmt.Errorf("%w, Options.Bootstrap for %q", err, slices.Sorted(maps.Keys(boot)))
		}
		return nil, err
	}
	if r.pod == "" {
		log.Info("This pod's name is unknown; enforcing the base share of every plan", "podNameVar", reload.EnvPodName)
	}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		if err := r.put(plans[name], false); err != nil {
			r.discard()
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(boot)) {
		if _, ok := plans[name]; ok {
			continue
		}
		log.Info("No published plan for the gate; enforcing the bootstrap plan until one arrives, and acknowledging nothing",
			"gate", name, "bootstrapWait", wait)
		if err := r.put(boot[name], true); err != nil {
			r.discard()
			return nil, err
		}
	}
	return r, nil
}

// bootstrapPlans checks Options.Bootstrap and returns its documents by gate,
// with the version and hash filled in.
func bootstrapPlans(plans []Share) (map[string]plan.Document, error) {
	boot := make(map[string]plan.Document, len(plans))
	var errs []error
	for i, p := range plans {
		field := fmt.Sprintf("Options.Bootstrap[%d]", i)
		if p.Epoch != "" || p.Revision != 0 {
			errs = append(errs, fmt.Errorf("%s: Epoch and Revision must be unset: a bootstrap plan is this pod's share, not a published division", field))
			continue
		}
		d := p.document()
		// Validate asks for what a published document carries; a
		// bootstrap plan has no epoch or revision, so lend it some.
		probe := d
		probe.Epoch, probe.Revision = "bootstrap", 1
		if err := plan.Validate(probe); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			continue
		}
		if _, dup := boot[d.Gate]; dup {
			errs = append(errs, fmt.Errorf("%s: gate %q has a bootstrap plan already", field, d.Gate))
			continue
		}
		if d.Hash == "" {
			d.Hash = plan.Hash(d)
		}
		boot[d.Gate] = d
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("backpressure: %w", errors.Join(errs...))
	}
	return boot, nil
}

// Start follows the source and resizes the gates on every change until ctx
// ends; it blocks until then, and until this pod has shut down cleanly and
// handed its shares back:
//
//  1. every dispatcher runs the tasks it has queued and stops its workers
//     (see dispatch.Dispatcher.Shutdown), while the gates still admit;
//  2. every gate is closed: it admits nothing ever again, and calls
//     waiting for a permit are rejected with gate.Closed;
//  3. Start waits for the calls in flight on every gate to finish; steps 1
//     and 3 together take at most Options.DrainTimeout;
//  4. with acknowledgement on (Options.Ack), it annotates the pod with
//     "<epoch>/released" for every gate that has drained, trying for at most
//     Options.ReleaseTimeout. The operator then hands the share of this
//     terminating pod to the others without waiting for the pod to go.
//
// When Start returns, every goroutine the Runtime and its source started
// has ended. So end Start's context only once the server has stopped taking
// work that needs the gates (after http.Server.Shutdown, say), and before
// the process exits. Start returns nil once everything has drained and
// every gate has been released; an error from the source, or one naming the
// dispatchers or gates that had work left at the drain timeout (those gates
// are not released) or whose release could not be written; or an error, at
// once and changing nothing, when called twice.
func (r *Runtime) Start(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("backpressure: Start called twice")
	}
	if err := r.claim(); err != nil {
		r.unclaim()
		return err
	}
	defer r.unclaim()
	var lapses sync.WaitGroup
	if live, ok := r.src.(reload.Liveness); ok {
		lapses.Go(func() { r.followLapses(ctx, live) })
	}
	err := r.src.Start(ctx)
	lapses.Wait()
	return errors.Join(err, r.handBack())
}

// claim claims every gate for this process, when the pod is known: two
// enforcers of one gate in one pod would each enforce the whole share, and
// the pod, counted once, would have twice its share in flight.
func (r *Runtime) claim() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims = map[string]io.Closer{}
	var taken []string
	for _, name := range slices.Sorted(maps.Keys(r.gates)) {
		if err := r.claimLocked(name); err != nil {
			taken = append(taken, name)
		}
	}
	if len(taken) > 0 {
		return fmt.Errorf("backpressure: gates %q of pod %s/%s are %w: run one enforcer of a gate per pod (the library or the sidecar proxy, in one container)",
			taken, r.namespace, r.pod, errGateClaimed)
	}
	return nil
}

// claimLocked claims gate name once Start has begun, when the pod is known.
func (r *Runtime) claimLocked(name string) error {
	if r.claims == nil || r.pod == "" || r.claims[name] != nil {
		return nil
	}
	c, err := claimGate(r.namespace, r.pod, name)
	if err != nil {
		return err
	}
	r.claims[name] = c
	return nil
}

// unclaim gives every claimed gate up.
func (r *Runtime) unclaim() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.claims {
		_ = c.Close()
	}
	r.claims = nil
}

// handBack stops the dispatchers, closes every gate, waits for the calls in
// flight to drain, and releases the gates that did.
func (r *Runtime) handBack() error {
	r.stopOffers()
	r.mu.RLock()
	all := maps.Clone(r.gates)
	r.mu.RUnlock()

	drainCtx, cancel := context.WithTimeout(context.Background(), r.drainTimeout)
	defer cancel()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if d := all[name].dispatcher; d != nil {
			if err := d.Shutdown(drainCtx); err != nil {
				errs = append(errs, fmt.Errorf("backpressure: dispatcher %q: %w", name, err))
			}
		}
	}
	for _, e := range all {
		e.gate.Close()
	}
	var drained, stuck []string
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if r.waitHeld(drainCtx, name, all[name].gate, 0) == nil {
			drained = append(drained, name)
		} else {
			stuck = append(stuck, name)
		}
	}
	// A gate still on its bootstrap plan has no published share to hand
	// back: the operator never counted this pod in it.
	r.mu.RLock()
	drained = slices.DeleteFunc(drained, func(name string) bool { return all[name].bootstrap })
	r.mu.RUnlock()
	if len(stuck) > 0 {
		inFlight := make([]int, len(stuck))
		for i, name := range stuck {
			inFlight[i], _ = r.holding(name, all[name].gate)
		}
		r.log.Info("Gates still had calls in flight when the drain timeout passed; not releasing them",
			"gates", stuck, "inFlight", inFlight, "drainTimeout", r.drainTimeout)
		errs = append(errs, fmt.Errorf("backpressure: gates %q still had calls in flight after %v; not released", stuck, r.drainTimeout))
	}
	if rel, ok := r.src.(reload.Releaser); ok && len(drained) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), r.releaseTimeout)
		defer cancel()
		if err := rel.Release(ctx, drained); err != nil {
			errs = append(errs, fmt.Errorf("backpressure: release gates %q: %w", drained, err))
		}
	}
	return errors.Join(errs...)
}

// enforced is the source's Options.Enforced: it returns once the gate
// enforces d's revision and its calls in flight are within the permits d
// gives this pod, polling every pollInterval, or ctx.Err().
func (r *Runtime) enforced(ctx context.Context, d plan.Document) error {
	permits := gateLimits(d.For(r.pod)).Permits
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		r.mu.RLock()
		e := r.gates[d.Gate]
		// A bootstrap plan is never what the operator published, whatever
		// its fields: nothing is acknowledged until d itself is in force.
		inForce := e != nil && !e.bootstrap && e.plan.Epoch == d.Epoch && e.plan.Revision == d.Revision
		r.mu.RUnlock()
		// Checked after the revision: the gate's limit is the revision's
		// from then on, so calls in flight can only fall to it.
		if inForce {
			if n, known := r.holding(d.Gate, e.gate); known && n <= permits {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// holding returns the permits of gate g, named name, that this pod holds:
// its calls in flight and what Options.Held counts; false while Held says
// the count is unknown.
func (r *Runtime) holding(name string, g *gate.Gate) (int, bool) {
	n := g.InFlight()
	if r.held == nil {
		return n, true
	}
	h := r.held(name)
	return n + max(h, 0), h >= 0
}

// waitHeld returns nil once this pod holds at most n permits of gate g,
// named name (see holding), polling every pollInterval, or ctx.Err().
func (r *Runtime) waitHeld(ctx context.Context, name string, g *gate.Gate, n int) error {
	within := func() bool {
		h, known := r.holding(name, g)
		return known && h <= n
	}
	if within() {
		return nil
	}
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if within() {
				return nil
			}
		}
	}
}

// Gate returns the gate named name. It returns an error matching ErrNoPlan
// when the source has never held a plan for that gate (nor
// Options.Bootstrap): a misspelt name, or a gate the operator does not
// publish for this workload. A gate named in Options.Gates or
// Options.Dispatchers always exists once New has succeeded, so look those
// up once, right after New, and fail the start on an error. The gate is
// never replaced: keep the pointer.
func (r *Runtime) Gate(name string) (*gate.Gate, error) {
	e, err := r.enforcer(name)
	if err != nil {
		return nil, err
	}
	return e.gate, nil
}

// Budget returns the retry budget of the gate named name, refilled at the
// plan's RetryBudgetPerSecond, for retry.Policy.Budget; it fails like Gate.
func (r *Runtime) Budget(name string) (*retry.Budget, error) {
	e, err := r.enforcer(name)
	if err != nil {
		return nil, err
	}
	return e.budget, nil
}

// Dispatcher returns the dispatcher of the gate named name. It fails like
// Gate, and also when name was not listed in Options.Dispatchers.
func (r *Runtime) Dispatcher(name string) (*dispatch.Dispatcher, error) {
	e, err := r.enforcer(name)
	if err != nil {
		return nil, err
	}
	if e.dispatcher == nil {
		return nil, fmt.Errorf("backpressure: gate %q has no dispatcher; name it in Options.Dispatchers", name)
	}
	return e.dispatcher, nil
}

// Share returns the share in force on the gate named name: this pod's own
// share of the published plan; it fails like Gate. A bootstrap share (see
// Options.Bootstrap) has an empty Epoch.
func (r *Runtime) Share(name string) (Share, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, err := r.enforcerLocked(name)
	if err != nil {
		return Share{}, err
	}
	return shareOf(e.inForce()), nil
}

// Shutdown stops every dispatcher once it has run its queued tasks (see
// dispatch.Dispatcher.Shutdown), then closes every gate, so that calls still
// waiting are rejected with gate.Closed. Start does all of this when its
// context ends; Shutdown is for a Runtime that is given up without having
// been started (a service whose start failed after New), and to stop the
// dispatchers earlier than Start would. It returns an error naming each
// dispatcher that had not drained when ctx ended.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.stopOffers()
	r.mu.RLock()
	all := slices.Collect(maps.Values(r.gates))
	r.mu.RUnlock()
	var errs []error
	for _, e := range all {
		if e.dispatcher != nil {
			if err := e.dispatcher.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("backpressure: dispatcher %q: %w", e.dispatcher.Name(), err))
			}
		}
	}
	for _, e := range all {
		e.gate.Close()
	}
	return errors.Join(errs...)
}

// discard undoes a New that failed half-way: it stops exporting the gates
// made so far, which matters when the registerer is shared, and closes them.
func (r *Runtime) discard() {
	r.stopOffers()
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.gates {
		r.metrics.gates.Remove(name)
		r.metrics.budgets.Remove(name)
		r.metrics.bootstrap.DeleteLabelValues(name)
		r.metrics.lapsed.DeleteLabelValues(name)
		if e.dispatcher != nil {
			r.metrics.dispatchers.Remove(name)
		}
		e.discard()
		delete(r.gates, name)
	}
}

func (r *Runtime) enforcer(name string) (*enforcer, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.enforcerLocked(name)
}

// enforcerLocked returns the enforcer of the gate named name, or an error
// matching ErrNoPlan that lists the gates there are.
func (r *Runtime) enforcerLocked(name string) (*enforcer, error) {
	if e, ok := r.gates[name]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w for gate %q; the Runtime has gates %q", ErrNoPlan, name, slices.Sorted(maps.Keys(r.gates)))
}

// apply is the source's Subscriber.
func (r *Runtime) apply(u reload.Update) {
	for _, name := range u.Changed {
		if err := r.put(u.Plans[name], false); err != nil {
			r.log.Error(err, "Could not put a plan in force", "gate", name, "hash", u.Plans[name].Hash)
		}
	}
}

// put puts this pod's share of d in force on its gate, making the gate
// first if it is new; bootstrap says d is Options.Bootstrap's. Calls are
// serialised by the source (and come from New before Start).
func (r *Runtime) put(doc plan.Document, bootstrap bool) error {
	d := doc.For(r.pod)
	limits := gateLimits(d)
	r.mu.Lock()
	e, ok := r.gates[d.Gate]
	wasBootstrap := ok && e.bootstrap
	if ok && sameContent(e.plan, d) && wasBootstrap == bootstrap {
		// A newer quota generation with the same plan: nothing to resize,
		// nothing to announce.
		e.plan = d
		r.mu.Unlock()
		return nil
	}
	var err error
	if ok {
		err = e.enforce(d)
		limits = gateLimits(e.inForce())
	} else {
		err = r.newEnforcerLocked(d, limits)
	}
	if err == nil {
		r.gates[d.Gate].bootstrap = bootstrap
		r.metrics.bootstrap.WithLabelValues(d.Gate).Set(boolGauge(bootstrap))
	}
	made := r.gates[d.Gate]
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if !ok {
		// After the lock, with the gate's plan in force: Offer may use
		// the Offerer at once.
		r.offerGate(d.Gate, made)
	}
	at := time.Now()
	if wasBootstrap && !bootstrap {
		r.log.Info("Published plan replaced the bootstrap plan", "gate", d.Gate, "epoch", d.Epoch, "revision", d.Revision)
	}

	if full := gateLimits(d); full.Permits < d.Permits {
		r.log.Info("Plan's permits exceed what a gate can count; the gate enforces fewer",
			"gate", d.Gate, "planPermits", d.Permits, "permits", full.Permits)
	}
	// The example app's e2e harness parses this line: its keys are fixed.
	r.log.Info("Applied plan", "gate", d.Gate, "hash", d.Hash, "permits", limits.Permits)
	r.log.V(1).Info("Applied revision", "gate", d.Gate, "epoch", d.Epoch, "revision", d.Revision,
		"ownShare", hasPod(doc, r.pod))
	if r.onApplied != nil {
		r.onApplied(Applied{Share: shareOf(d), At: at})
	}
	return nil
}

// newEnforcerLocked makes and keeps the gate, budget and dispatcher for d.
func (r *Runtime) newEnforcerLocked(d plan.Document, limits gate.Limits) error {
	g, err := gate.New(d.Gate, limits)
	if err != nil {
		return fmt.Errorf("backpressure: %w", err)
	}
	if r.lender != nil {
		if l := r.lender(d.Gate); l != nil {
			// Validated in New.
			_ = g.SetLenderRules(l, r.lendRules)
		}
	}
	e := &enforcer{gate: g, budget: retry.NewBudget(d.Gate, d.RetryBudgetPerSecond, retryBurst), plan: d}
	if r.dispatched[d.Gate] {
		if e.dispatcher, err = dispatch.New(d.Gate, dispatchLimits(d)); err != nil {
			return fmt.Errorf("backpressure: %w", err)
		}
	}
	// Metrics last: a gate that could not be exported is not kept, so the
	// next plan for it tries again.
	err = r.metrics.gates.Add(g)
	if err == nil {
		if err = r.metrics.budgets.Add(e.budget); err != nil {
			r.metrics.gates.Remove(d.Gate)
		}
	}
	if err == nil && e.dispatcher != nil {
		if err = r.metrics.dispatchers.Add(e.dispatcher); err != nil {
			r.metrics.gates.Remove(d.Gate)
			r.metrics.budgets.Remove(d.Gate)
		}
	}
	if err != nil {
		e.discard()
		return fmt.Errorf("backpressure: %w", err)
	}
	r.gates[d.Gate] = e
	if err := r.claimLocked(d.Gate); err != nil {
		// A gate that appears while the pod runs cannot fail Start: say so.
		r.log.Error(err, "Gate is enforced by another process of this pod; each enforces the whole share", "gate", d.Gate, "pod", r.pod)
	}
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sameContent reports whether a and b are the same plan, whatever the quota
// generation each was written for.
func sameContent(a, b plan.Document) bool {
	a.Generation = b.Generation
	return plan.Equal(a, b)
}

// hasPod reports whether d gives pod a share of its own.
func hasPod(d plan.Document, pod string) bool {
	_, ok := d.Pods[pod]
	return ok && pod != ""
}

// discard stops an enforcer that was never handed out.
func (e *enforcer) discard() {
	e.gate.Close()
	if e.dispatcher != nil {
		_ = e.dispatcher.Shutdown(context.Background()) // it has never had a task
	}
}

// inForce returns what the gate enforces: its plan, or a share of 0 while
// it has lapsed.
func (e *enforcer) inForce() plan.Document {
	if e.lapsed {
		return e.plan.WithShare(plan.PodShare{})
	}
	return e.plan
}

// enforce makes d the enforcer's plan and resizes it to what it then
// enforces (inForce).
func (e *enforcer) enforce(d plan.Document) error {
	e.plan = d
	eff := e.inForce()
	if err := e.update(eff, gateLimits(eff)); err != nil {
		return err
	}
	e.plan = d
	return nil
}

// update resizes the enforcer in place. Its limits were validated by package
// plan, so the updates fail only on a dispatcher that was shut down.
func (e *enforcer) update(d plan.Document, limits gate.Limits) error {
	if err := e.gate.Update(limits); err != nil {
		return fmt.Errorf("backpressure: %w", err)
	}
	e.budget.SetRate(d.RetryBudgetPerSecond, retryBurst)
	e.plan = d
	if e.dispatcher != nil {
		if err := e.dispatcher.Update(dispatchLimits(d)); err != nil {
			return fmt.Errorf("backpressure: %w", err)
		}
	}
	return nil
}
