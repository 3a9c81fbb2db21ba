package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/reload"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/retry"
)

// Options configure a Runtime. The zero value is valid: no gate is required,
// nothing is logged, no metric is registered.
type Options struct {
	// Gates names the gates the service uses. New fails unless the source
	// holds a valid plan for each of them, so a pod that would otherwise
	// start with a gate it cannot enforce fails at once instead.
	Gates []string
	// Dispatchers names the gates that also get a dispatcher, sized by the
	// plan's workers and queue capacity (see DispatchLimits). Each is
	// required like the names in Gates.
	Dispatchers []string
	// Registerer registers the backpressure_gate_*, backpressure_retry_*,
	// backpressure_dispatcher_* and backpressure_config_* metrics; nil
	// registers nothing. The global registry is never used.
	Registerer prometheus.Registerer
	// Logger receives the logs of the Runtime and its source; the zero value
	// discards them. Every plan put in force is logged at level 0 as
	// "Applied plan" with the keys gate, hash and permits.
	Logger logr.Logger
	// Ack, when not nil, turns on acknowledgement: after each reload the pod
	// named by POD_NAME and POD_NAMESPACE is annotated with
	// applied.backpressure.dev/<gate>: <hash>. See reload.AckOptions.
	Ack *reload.AckOptions
	// OnApplied, when not nil, is called every time a plan is put in force
	// on a gate, the first one included, after the gate, its retry budget
	// and its dispatcher have it. It runs on the source's goroutine (on
	// New's for the first plans) and must not block: the next reload waits
	// for it.
	OnApplied func(Applied)
}

// Applied describes a plan just put in force on a gate.
type Applied struct {
	// Gate is the gate's name.
	Gate string
	// Plan is the document now in force.
	Plan plan.Document
	// Limits are the gate's limits now in force, GateLimits(Plan).
	Limits gate.Limits
	// At is when the plan was put in force.
	At time.Time
}

// Runtime enforces the plans of one source: it keeps a gate and a retry
// budget (and, where asked, a dispatcher) for every gate the source has a
// plan for, and resizes them in place on every reload. Gates, budgets and
// dispatchers are made once and never replaced, so a caller may keep the
// pointers. A gate whose document disappears from the source keeps its last
// plan (see package reload).
//
// A Runtime is safe for concurrent use by multiple goroutines.
type Runtime struct {
	src        PlanSource
	log        logr.Logger
	metrics    *collectors
	onApplied  func(Applied)
	dispatched map[string]bool // gates that get a dispatcher; read-only after New

	mu    sync.RWMutex
	gates map[string]*enforcer // guarded by mu
}

// enforcer is what the Runtime keeps for one gate.
type enforcer struct {
	gate       *gate.Gate
	budget     *retry.Budget
	dispatcher *dispatch.Dispatcher // nil unless the gate is in Options.Dispatchers
	plan       plan.Document        // the plan in force
}

// New opens src and puts its plans in force. It fails when the source has no
// valid plan at all (the error matches reload.ErrNoPlan), when it has none
// for a gate named in Options.Gates or Options.Dispatchers (matches
// reload.ErrNoPlan too), or when metrics cannot be registered. New reads the
// source once; Start follows its changes.
func New(ctx context.Context, src Source, opts Options) (*Runtime, error) {
	if src == nil {
		return nil, errors.New("runtime: New needs a Source")
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	m, err := newCollectors(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("runtime: register metrics: %w", err)
	}
	r := &Runtime{
		log:        log,
		metrics:    m,
		onApplied:  opts.OnApplied,
		dispatched: map[string]bool{},
		gates:      map[string]*enforcer{},
	}
	for _, name := range opts.Dispatchers {
		r.dispatched[name] = true
	}

	r.src, err = src(ctx, reload.Options{
		Subscriber: r.apply,
		Logger:     opts.Logger,
		Registerer: opts.Registerer,
		Ack:        opts.Ack,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	plans := r.src.Plans()
	for _, name := range slices.Concat(opts.Gates, opts.Dispatchers) {
		if _, ok := plans[name]; !ok {
			return nil, fmt.Errorf("runtime: %w for gate %q; the source holds plans for %q",
				reload.ErrNoPlan, name, slices.Sorted(maps.Keys(plans)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		if err := r.put(plans[name]); err != nil {
			r.discard()
			return nil, err
		}
	}
	return r, nil
}

// Start follows the source and resizes the gates on every change until ctx
// ends; it blocks until then and returns nil, or an error when called twice.
// Gates keep their last plans and keep working after Start returns, so a
// server can finish its in-flight requests after the source has stopped.
func (r *Runtime) Start(ctx context.Context) error {
	return r.src.Start(ctx)
}

// Gate returns the gate named name, or nil when the source has never held a
// plan for it. Names listed in Options.Gates or Options.Dispatchers always
// have a gate.
func (r *Runtime) Gate(name string) *gate.Gate {
	if e := r.enforcer(name); e != nil {
		return e.gate
	}
	return nil
}

// Budget returns the retry budget of the gate named name, refilled at the
// plan's retryBudgetPerSecond, or nil when there is no such gate (see Gate).
func (r *Runtime) Budget(name string) *retry.Budget {
	if e := r.enforcer(name); e != nil {
		return e.budget
	}
	return nil
}

// Dispatcher returns the dispatcher of the gate named name, or nil unless
// name was listed in Options.Dispatchers.
func (r *Runtime) Dispatcher(name string) *dispatch.Dispatcher {
	if e := r.enforcer(name); e != nil {
		return e.dispatcher
	}
	return nil
}

// Plan returns the plan in force on the gate named name, and false when
// there is no such gate (see Gate).
func (r *Runtime) Plan(name string) (plan.Document, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.gates[name]
	if !ok {
		return plan.Document{}, false
	}
	return e.plan, true
}

// Shutdown stops every dispatcher once it has run its queued tasks (see
// dispatch.Dispatcher.Shutdown), then closes every gate, so that calls still
// waiting are rejected with gate.Closed. Call it after Start has returned
// and the work that uses the gates has ended. It returns an error naming
// each dispatcher that had not drained when ctx ended.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.mu.RLock()
	all := slices.Collect(maps.Values(r.gates))
	r.mu.RUnlock()
	var errs []error
	for _, e := range all {
		if e.dispatcher != nil {
			if err := e.dispatcher.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("runtime: dispatcher %q: %w", e.dispatcher.Name(), err))
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
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.gates {
		r.metrics.gates.Remove(name)
		r.metrics.budgets.Remove(name)
		if e.dispatcher != nil {
			r.metrics.dispatchers.Remove(name)
		}
		e.discard()
		delete(r.gates, name)
	}
}

func (r *Runtime) enforcer(name string) *enforcer {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gates[name]
}

// apply is the source's Subscriber.
func (r *Runtime) apply(u reload.Update) {
	for _, name := range u.Changed {
		if err := r.put(u.Plans[name]); err != nil {
			r.log.Error(err, "Could not put a plan in force", "gate", name, "hash", u.Plans[name].Hash)
		}
	}
}

// put puts d in force on its gate, making the gate first if it is new.
// Calls are serialised by the source (and come from New before Start).
func (r *Runtime) put(d plan.Document) error {
	limits := GateLimits(d)
	r.mu.Lock()
	e, ok := r.gates[d.Gate]
	if ok && sameContent(e.plan, d) {
		// A newer quota generation with the same plan: nothing to resize,
		// nothing to announce.
		e.plan = d
		r.mu.Unlock()
		return nil
	}
	var err error
	if ok {
		err = e.update(d, limits)
	} else {
		err = r.newEnforcerLocked(d, limits)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	at := time.Now()

	if limits.Permits < d.Permits {
		r.log.Info("Plan's permits exceed what a gate can count; the gate enforces fewer",
			"gate", d.Gate, "planPermits", d.Permits, "permits", limits.Permits)
	}
	r.log.Info("Applied plan", "gate", d.Gate, "hash", d.Hash, "permits", limits.Permits)
	if r.onApplied != nil {
		r.onApplied(Applied{Gate: d.Gate, Plan: d, Limits: limits, At: at})
	}
	return nil
}

// newEnforcerLocked makes and keeps the gate, budget and dispatcher for d.
func (r *Runtime) newEnforcerLocked(d plan.Document, limits gate.Limits) error {
	g, err := gate.New(d.Gate, limits)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	e := &enforcer{gate: g, budget: retry.NewBudget(d.Gate, d.RetryBudgetPerSecond, retryBurst), plan: d}
	if r.dispatched[d.Gate] {
		if e.dispatcher, err = dispatch.New(d.Gate, DispatchLimits(d)); err != nil {
			return fmt.Errorf("runtime: %w", err)
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
		return fmt.Errorf("runtime: %w", err)
	}
	r.gates[d.Gate] = e
	return nil
}

// sameContent reports whether a and b are the same plan, whatever the quota
// generation each was written for.
func sameContent(a, b plan.Document) bool {
	a.Generation = b.Generation
	return a == b
}

// discard stops an enforcer that was never handed out.
func (e *enforcer) discard() {
	e.gate.Close()
	if e.dispatcher != nil {
		_ = e.dispatcher.Shutdown(context.Background()) // it has never had a task
	}
}

// update resizes the enforcer in place. Its limits were validated by package
// plan, so the updates fail only on a dispatcher that was shut down.
func (e *enforcer) update(d plan.Document, limits gate.Limits) error {
	if err := e.gate.Update(limits); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	e.budget.SetRate(d.RetryBudgetPerSecond, retryBurst)
	e.plan = d
	if e.dispatcher != nil {
		if err := e.dispatcher.Update(DispatchLimits(d)); err != nil {
			return fmt.Errorf("runtime: %w", err)
		}
	}
	return nil
}
