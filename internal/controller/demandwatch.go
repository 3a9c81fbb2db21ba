package controller

import (
	"context"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// The demand watch reads the demand of every quota whose shares follow it,
// once an interval, outside the reconciles, and wakes a quota's reconciler
// only when the reading would change what its last step did: move its
// division (it left the band, or the dwell after a move ended with the
// demands elsewhere) or its DemandFollowing condition. No watch says that
// demand moved, so before it every such quota was reconciled every
// interval, whatever it read; under steady demand nearly all of those
// reconciles (the quota's pods, ConfigMaps and status read, its division
// stepped) found nothing to do, and at thousands of pods they were as many
// as the reconciles for everything else the cluster did.

// demandWakeBuffer is how many wakes wait for a reconciler before the
// watch drops more; a dropped wake is made again at the next interval.
const demandWakeBuffer = 1024

// demandPollsPerInterval is how often, per demand interval, the watch
// looks for readings that have aged: a quota is read again at most a 60th
// of an interval (250 ms) after its reading (by the watch or a reconcile)
// aged. The readings are as spread in time as the reconciles that made
// them, and the reads and wakes keep that spread: polling at a quarter
// interval woke a quarter interval's moves at once, and an event behind
// such a burst waited for all of it.
const demandPollsPerInterval = 60

// followWatch is what a quota whose shares follow demand last read and
// divided: enough to tell, from a new reading, whether its next step would
// differ.
type followWatch struct {
	// namespace, selector and metric are what its demand is read of.
	namespace string
	selector  labels.Selector
	metric    string
	// wake is the object whose reconcile steps its division: the quota, or
	// the contract it shares (set by Publisher.watchDemand).
	wake client.Object
	// ready names its Ready pods (not the permit server's); state is what
	// its DemandFollowing condition said.
	ready []string
	state followState
	// part was divided over in, whose Previous are the targets the step
	// gave them; names are the pods' names, aligned with in. in is nil
	// when the step divided nothing on demand.
	part  int64
	in    []division.Claimant
	names []string
}

// followState is what a DemandFollowing condition says: its reason, how
// many Ready pods were measured and, while a reading that failed is
// covered by an older one, when that one was read.
type followState struct {
	reason   string
	measured int
	at       time.Time
}

// stateOf returns the state a reading gives the condition (see
// Publisher.shareDemand).
func (w *followWatch) stateOf(values map[string]int64, at time.Time, err error) followState {
	switch {
	case err != nil && values == nil:
		return followState{reason: v1alpha1.ReasonDemandUnavailable}
	case err != nil:
		return followState{reason: v1alpha1.ReasonDemandStale, measured: w.measured(values), at: at}
	default:
		return followState{reason: v1alpha1.ReasonDemandFollowed, measured: w.measured(values)}
	}
}

// measured counts the Ready pods values measures.
func (w *followWatch) measured(values map[string]int64) int {
	n := 0
	for _, name := range w.ready {
		if _, ok := values[name]; ok {
			n++
		}
	}
	return n
}

// divided notes that a step divided part over in (names aligned) into out.
func (w *followWatch) divided(part int64, in []division.Claimant, names []string, out []int64) {
	w.part, w.names = part, names
	w.in = slices.Clone(in)
	for i := range w.in {
		if w.in[i].Serving {
			w.in[i].Previous = out[i]
		}
	}
}

// moves reports whether a step given the reading (values, at, err) would
// change what the last one did: the condition, or, dwelling or not, the
// targets.
func (w *followWatch) moves(values map[string]int64, at time.Time, err error, dwelling bool) bool {
	if w.stateOf(values, at, err) != w.state {
		return true
	}
	if values == nil || w.in == nil {
		return false
	}
	in := slices.Clone(w.in)
	for i := range in {
		in[i].Demand = -1
		if d, ok := values[w.names[i]]; ok {
			in[i].Demand = d
		}
	}
	out, _ := followDivision(w.part, in, dwelling)
	return !isPrevious(in, out)
}

// watchDemand hands the demand watch what part's step read and divided on
// demand, with wake, the object whose reconcile steps it; a part that read
// no demand (it does not follow it, or its workload is gone or invalid) is
// no longer watched.
func (p *Publisher) watchDemand(part *quotaPart, wake client.Object) {
	key := types.NamespacedName{Namespace: part.quota.Namespace, Name: part.quota.Name}
	if part.caller == nil || part.caller.watch == nil {
		p.demand.unwatch(key)
		return
	}
	w := part.caller.watch
	w.wake = wake
	p.demand.mu.Lock()
	defer p.demand.mu.Unlock()
	if p.demand.watched == nil {
		p.demand.watched = map[types.NamespacedName]*followWatch{}
	}
	p.demand.watched[key] = w
}

// unwatch stops the demand watch of the quota key.
func (r *demandReads) unwatch(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.watched, key)
	r.mu.Unlock()
}

// unwatchWokenBy stops the demand watch of every quota whose reading wakes
// the contract named contract.
func (r *demandReads) unwatchWokenBy(contract string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, w := range r.watched {
		if dc, ok := w.wake.(*v1alpha1.DownstreamContract); ok && dc.Name == contract {
			delete(r.watched, key)
		}
	}
}

// due returns the watched quotas whose reading is older than the interval
// at now, or missing.
func (r *demandReads) due(now time.Time) map[types.NamespacedName]*followWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.NamespacedName]*followWatch{}
	for key, w := range r.watched {
		last, ok := r.last[key]
		if !ok || now.Sub(last.at) >= r.interval || now.Before(last.at) {
			out[key] = w
		}
	}
	return out
}

// demandWatch is the manager's runnable that reads the watched quotas'
// demand every interval and wakes those whose step it would change.
type demandWatch struct {
	p *Publisher
}

// Start polls until ctx is done.
func (d demandWatch) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, d.poll, max(d.p.demand.interval/demandPollsPerInterval, time.Millisecond))
	return nil
}

// demandReaders is how many quotas' demand the watch reads at once: the
// HPA controller's default concurrent syncs, which read the same API. At
// 2,000 quotas and 10 ms a read through the aggregation layer, a poll
// reads them all in 4 s of the 15.
const demandReaders = 5

// poll reads the demand of every watched quota whose reading aged and
// wakes the ones whose step it would change. A quota woken reads the same
// reading in its reconcile: it is younger than the interval.
func (d demandWatch) poll(ctx context.Context) {
	var g errgroup.Group
	g.SetLimit(demandReaders)
	for key, w := range d.p.demand.due(d.p.clock.Now()) {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			d.check(ctx, key, w)
			return nil
		})
	}
	_ = g.Wait() // check returns no error
}

// check reads the demand of the quota key, watched as w, and wakes it when
// the reading would change its step.
func (d demandWatch) check(ctx context.Context, key types.NamespacedName, w *followWatch) {
	r := &d.p.demand
	now := d.p.clock.Now()
	values, at, err := r.read(ctx, key, w.namespace, w.selector, w.metric, now)
	if ctx.Err() != nil || !w.moves(values, at, err, r.dwelling(key, now)) {
		return
	}
	wakes := r.wakeQuotas
	if _, ok := w.wake.(*v1alpha1.DownstreamContract); ok {
		wakes = r.wakeContracts
	}
	select {
	case wakes <- event.GenericEvent{Object: w.wake}:
	default:
		ctrl.LoggerFrom(ctx).V(1).Info("Demand wake dropped; the next interval wakes it again", "quota", key)
	}
}
