package controller

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/demand"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// DefaultDemandInterval is how often a quota whose shares follow demand
// reads it, and so how often its division is stepped although no watch
// fires. It is the HPA controller's default sync period, the pace at which
// Kubernetes already reads the same metrics, and a common scrape interval
// of the Prometheus behind an adapter: reading faster sees the same
// sample again. Demand-following is for an imbalance that lasts minutes
// (pinned connections); the jitter of seconds is the reserve's.
const DefaultDemandInterval = 15 * time.Second

// demandKeep is how many intervals the last reading that succeeded is
// followed while later reads fail: a minute at the default interval, long
// enough for an adapter's restart or a Prometheus scrape or two lost,
// short enough that shares do not follow a picture of the load that is
// long gone. Without it an outage of seconds would move every pod's share
// to equal and back, each through a handover.
const demandKeep = 4

// demandDwell is, in intervals, how long after a division moved on demand
// its next move on demand waits: a minute at the default interval. The
// band keeps a division still while the demands drift a little; a pod
// whose demand reads low once and back at the next read would otherwise
// move its share down and up again within 15 s, each a handover. Pods
// joining or leaving move the division at once whatever the dwell.
const demandDwell = 4

// The operator reads the custom metrics API's Pods metrics, as the HPA
// controller does.
// +kubebuilder:rbac:groups=custom.metrics.k8s.io,resources=pods,verbs=get;list

// WithDemandSource sets where quotas with spec.shares.policy Demand read
// their pods' demand; without one they divide equally and say so.
func WithDemandSource(s demand.Source) Option {
	return func(p *Publisher) { p.demand.source = s }
}

// WithDemandInterval sets how often a quota reads its pods' demand; the
// default is DefaultDemandInterval.
func WithDemandInterval(d time.Duration) Option {
	return func(p *Publisher) { p.demand.interval = d }
}

// demandReads is the demand source and the last reading of every quota:
// a quota reconciled many times within an interval (its pods change, its
// ConfigMap comes back through the watch) reads once.
type demandReads struct {
	source   demand.Source
	interval time.Duration

	mu   sync.Mutex
	last map[types.NamespacedName]demandReading
	// good is every quota's last reading that succeeded.
	good map[types.NamespacedName]demandReading
	// moved is when every quota's division last moved on demand.
	moved map[types.NamespacedName]time.Time
	// reading locks the read of each quota's demand (see read).
	reading map[types.NamespacedName]*sync.Mutex
	// watched is what every quota that follows demand last divided on
	// it, for the demand watch (see demandwatch.go).
	watched map[types.NamespacedName]*followWatch
	// wakeQuotas and wakeContracts carry the demand watch's wakes to the
	// quota and the contract reconcilers.
	wakeQuotas, wakeContracts chan event.GenericEvent
}

// dwelling reports whether the division of the quota key moved on demand
// less than demandDwell intervals before now.
func (r *demandReads) dwelling(key types.NamespacedName, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.moved[key]
	return ok && !now.Before(at) && now.Sub(at) < demandDwell*r.interval
}

// noteMove notes that the division of the quota key moved on demand at now.
func (r *demandReads) noteMove(key types.NamespacedName, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.moved == nil {
		r.moved = map[types.NamespacedName]time.Time{}
	}
	r.moved[key] = now
}

// demandReading is one read of a quota's demand.
type demandReading struct {
	at time.Time
	// of is what was read: the metric and the selector.
	of     string
	values map[string]int64
	err    error
}

// read returns the demand of the pods in namespace ns that sel matches,
// from metric, for the quota key: the last reading when it is of the same
// and younger than the interval. When the read fails but a reading of the
// same that succeeded is younger than demandKeep intervals, read returns
// that one's values and when it was read together with the error: the
// shares follow it meanwhile. One quota's demand is read by one caller at
// a time, so that the demand watch and a reconcile due at the same moment
// read it once.
func (r *demandReads) read(ctx context.Context, key types.NamespacedName, ns string, sel labels.Selector, metric string, now time.Time) (map[string]int64, time.Time, error) {
	of := metric + " " + sel.String()
	defer r.lockKey(key)()
	r.mu.Lock()
	last, ok := r.last[key]
	r.mu.Unlock()
	if !ok || last.of != of || now.Sub(last.at) >= r.interval || now.Before(last.at) {
		last = demandReading{at: now, of: of}
		if r.source == nil {
			last.err = fmt.Errorf("%w: the operator was started without a custom metrics reader", demand.ErrUnavailable)
		} else {
			last.values, last.err = r.source.Read(ctx, ns, sel, metric)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last, r.good = map[types.NamespacedName]demandReading{}, map[types.NamespacedName]demandReading{}
	}
	r.last[key] = last
	if last.err == nil {
		r.good[key] = last
		return last.values, last.at, nil
	}
	if good, ok := r.good[key]; ok && good.of == of && now.Sub(good.at) < demandKeep*r.interval && !now.Before(good.at) {
		return good.values, good.at, last.err
	}
	return nil, time.Time{}, last.err
}

// lockKey locks the reading of the quota key and returns its unlock.
func (r *demandReads) lockKey(key types.NamespacedName) func() {
	r.mu.Lock()
	if r.reading == nil {
		r.reading = map[types.NamespacedName]*sync.Mutex{}
	}
	m, ok := r.reading[key]
	if !ok {
		m = &sync.Mutex{}
		r.reading[key] = m
	}
	r.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// forget drops the reading and the watch of a quota that is gone.
func (r *demandReads) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.last, key)
	delete(r.good, key)
	delete(r.moved, key)
	delete(r.reading, key)
	delete(r.watched, key)
	r.mu.Unlock()
}

// followsDemand reports whether q asks for shares that follow demand, and
// the metric it reads.
func followsDemand(q *v1alpha1.DownstreamQuota) (string, bool) {
	s := q.Spec.Shares
	if s == nil || s.Policy != v1alpha1.SharesDemand {
		return "", false
	}
	if s.Metric == "" {
		return demand.DefaultMetric, true
	}
	return s.Metric, true
}

// shareDemand reads the demand of the pods of part's workload when its
// quota asks for shares that follow it, gives it to part's caller, and
// sets the DemandFollowing condition. When it reads, it leaves on the
// caller what the demand watch needs to read it again (see
// Publisher.watchDemand).
func (p *Publisher) shareDemand(ctx context.Context, part *quotaPart) {
	q := part.quota
	key := types.NamespacedName{Namespace: q.Namespace, Name: q.Name}
	metric, ok := followsDemand(q)
	if !ok {
		part.caller.demand = nil
		if meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionDemandFollowing) != nil {
			part.in.demandCondition = &metav1.Condition{Type: v1alpha1.ConditionDemandFollowing, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ReasonEqualShares, Message: "spec.shares.policy is Equal; the pods' part is divided equally"}
		}
		return
	}
	if part.facts.workload == nil {
		return
	}
	sel := part.facts.workload.selector
	values, at, err := p.demand.read(ctx, key, q.Namespace, sel, metric, p.clock.Now())
	w := &followWatch{namespace: q.Namespace, selector: sel, metric: metric}
	for _, m := range part.caller.members {
		if m.serving && !part.caller.isLender(m) {
			w.ready = append(w.ready, m.name)
		}
	}
	w.state = w.stateOf(values, at, err)
	part.caller.watch = w
	c := &metav1.Condition{Type: v1alpha1.ConditionDemandFollowing}
	part.in.demandCondition = c
	if w.state.reason == v1alpha1.ReasonDemandUnavailable {
		part.caller.demand = nil
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonDemandUnavailable
		c.Message = fmt.Sprintf("cannot read Pods metric %s: %v; the pods' part is divided equally until it can be", metric, err)
		return
	}
	part.caller.demand = values
	part.caller.dwelling = p.demand.dwelling(key, p.clock.Now())
	measured, ready := w.state.measured, len(w.ready)
	c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonDemandFollowed
	c.Message = fmt.Sprintf("the pods' shares follow Pods metric %s, read every %s; %d of %d Ready pods measured", metric, p.demand.interval, measured, ready)
	if measured < ready {
		c.Message += " (the others claim without a cap, as under equal shares)"
	}
	if w.state.reason == v1alpha1.ReasonDemandStale {
		// The condition's message changes only with what it says, not
		// with every failed read: the time of the reading followed and
		// when it stops being followed.
		c.Reason = v1alpha1.ReasonDemandStale
		c.Message = fmt.Sprintf("cannot read Pods metric %s: %v; the pods' shares follow the reading of %s until %s, then are divided equally",
			metric, err, at.UTC().Format(time.RFC3339), at.Add(demandKeep*p.demand.interval).UTC().Format(time.RFC3339))
	}
}

// followTargets divides part over c's pods by their demand (division's
// DefaultFollow), aligned with pods; previous maps a pod's key to its
// target in the previous step, for the band. It notes what it divided on
// c's watch, so that the demand watch can tell when a later reading would
// move the division.
func (c *caller) followTargets(part int64, pods []division.Member, previous map[string]int64) []int64 {
	in := make([]division.Claimant, len(pods))
	names := make([]string, len(pods))
	for i, m := range pods {
		names[i] = c.nameOf(m.Key)
		cl := division.Claimant{Key: m.Key, Serving: m.Serving, Demand: -1}
		if d, ok := c.demand[names[i]]; ok {
			cl.Demand = d
		}
		if m.Serving {
			// A pod that serves no longer has target 0, whatever it may
			// still hold; the band compares the targets of serving pods.
			cl.Previous = m.Told
			if t, ok := previous[m.Key]; ok {
				cl.Previous = t
			}
		}
		in[i] = cl
	}
	out, moved := followDivision(part, in, c.dwelling)
	c.movedOnDemand = c.movedOnDemand || moved
	if c.watch != nil {
		c.watch.divided(part, in, names, out)
	}
	return out
}

// followDivision divides part over in by their demand, or keeps their
// previous targets while dwelling and they still divide part over the same
// pods; moved reports a move on demand: one that keeping the previous
// targets would not have made.
func followDivision(part int64, in []division.Claimant, dwelling bool) (out []int64, moved bool) {
	// hold keeps the previous targets whatever the demands say, while
	// they still divide part over the same pods: the band no drift leaves.
	hold := division.DefaultFollow
	hold.Band = division.Band{Min: math.MaxInt64}
	if dwelling {
		return hold.Targets(part, in), false
	}
	out = division.DefaultFollow.Targets(part, in)
	// (Asked only when the targets moved, which is rare under steady
	// demand.)
	return out, !isPrevious(in, out) && isPrevious(in, hold.Targets(part, in))
}

// isPrevious reports whether targets are the claimants' previous ones.
func isPrevious(in []division.Claimant, targets []int64) bool {
	for i, cl := range in {
		if targets[i] != cl.Previous {
			return false
		}
	}
	return true
}

// noteDemandMove notes, once a step's record is written, that the step
// moved c's division on demand, if it did: its next move on demand waits
// demandDwell intervals. A step that is not written (a stale cache, a
// failed write) moved nothing, and must not hold back the one that is.
func (p *Publisher) noteDemandMove(c *caller) {
	if c != nil && c.movedOnDemand {
		p.demand.noteMove(types.NamespacedName{Namespace: c.namespace, Name: c.gate}, p.clock.Now())
	}
}

// nameOf returns the pod name of one of c's keys.
func (c *caller) nameOf(key string) string { return strings.TrimPrefix(key, c.prefix) }

// previousTargets returns, by key, the targets a division's record lists
// for the pods that had not reached them (status.division.pods' target):
// with what the others are told, the previous step's targets. A pod it
// does not list was told its target.
func previousTargets(d *divisionInput) map[string]int64 {
	out := map[string]int64{}
	if d.record == nil || d.record.Epoch != d.epoch {
		return out
	}
	for _, p := range d.record.Pods {
		if p.Target != nil {
			out[p.Name] = int64(*p.Target)
		}
	}
	return out
}
