package observe

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

// Published is a plan the operator published, as the harness's watch of the
// ConfigMap first saw it.
type Published struct {
	Seen time.Time
	Hash string
	// Epoch and Revision are what a pod acknowledges once it enforces the
	// document.
	Epoch    string
	Revision int64
	// Permits is the base share: what a pod the document does not name
	// enforces.
	Permits int
	// Pods are the named pods' permits.
	Pods map[string]int
	// UnacknowledgedDelay is the document's: how long after a smaller
	// share the operator counts a pod that does not acknowledge at its old
	// one.
	UnacknowledgedDelay time.Duration
}

// Ack returns the acknowledgement of the document.
func (p Published) Ack() plan.Ack { return plan.Ack{Epoch: p.Epoch, Revision: p.Revision} }

// PermitsOf returns the permits the document gives pod.
func (p Published) PermitsOf(pod string) int {
	if n, ok := p.Pods[pod]; ok {
		return n
	}
	return p.Permits
}

// HandedOut returns the permits the document gives the named pods.
func (p Published) HandedOut() int {
	n := 0
	for _, v := range p.Pods {
		n += v
	}
	return n
}

// Divides reports whether the document gives every one of pods a share and
// the pods together total permits: the division of total for exactly those
// pods, once the handover is done.
func (p Published) Divides(pods []string, total int) bool {
	sum := 0
	for _, pod := range pods {
		n := p.PermitsOf(pod)
		if n < 1 {
			return false
		}
		sum += n
	}
	return len(pods) > 0 && sum == total
}

// Applied is a pod putting a plan in force, from its "Applied plan" log line.
// A lapse of the plan's source and its end log the plan's hash again with
// the permits then in force: the first Applied of a hash is when the pod
// put it in force, and the last Applied tells what the pod enforces.
type Applied struct {
	Pod     string
	Time    time.Time
	Hash    string
	Permits int
}

// RolloutSample is the quota's status.rollout and status.division at one
// moment.
type RolloutSample struct {
	Seen         time.Time
	Hash         string
	Divisor      int32
	Acknowledged int32
	Total        int32
	// Epoch and Revision are status.division's: the revision the rollout
	// counts acknowledgements of.
	Epoch    string
	Revision int64
	// Usable, HandedOut and Held are status.division's.
	Usable, HandedOut, Held int32
}

// AckSample is a pod's applied annotation as the harness's watch of the
// pods saw it change.
type AckSample struct {
	Seen time.Time
	Pod  string
	Ack  plan.Ack
}

// Observations collects what the harness learns while a variant runs: the
// plans the operator publishes, the plans the pods apply, and the quota's
// rollout. It is safe for concurrent use.
type Observations struct {
	mu        sync.Mutex
	published []Published
	applied   []Applied
	rollout   []RolloutSample
	acks      []AckSample
	lastAck   map[string]string    // pod → its applied annotation's value
	ackUID    map[string]types.UID // pod → the UID lastAck is of
	permits   map[string]int       // running pod → the permits it last applied
	metrics   map[string]string    // running pod → its /metrics address
}

// ServingMetrics records the address of a pod's /metrics listener.
func (o *Observations) ServingMetrics(pod, addr string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.metrics == nil {
		o.metrics = map[string]string{}
	}
	o.metrics[pod] = addr
}

// MetricsAddrs returns the /metrics address of every pod whose process
// runs and serves it.
func (o *Observations) MetricsAddrs() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]string, len(o.metrics))
	for pod, addr := range o.metrics {
		out[pod] = addr
	}
	return out
}

// CheckPermits scrapes the pods among running whose metrics address is
// known and compares their gate's permits with what their logs said.
func (o *Observations) CheckPermits(ctx context.Context, gate string, running []string) *PermitsCheck {
	o.mu.Lock()
	addrs := map[string]string{}
	for _, pod := range running {
		if a, ok := o.metrics[pod]; ok {
			addrs[pod] = a
		}
	}
	o.mu.Unlock()
	return checkPermits(ctx, gate, addrs, func(pod string) int {
		n, _ := o.PermitsOf([]string{pod}, "")
		return n
	})
}

// Applied records a pod's "Applied plan" log line.
func (o *Observations) Applied(pod string, l cluster.LogLine) {
	a := Applied{Pod: pod, Time: l.Time, Hash: l.Hash}
	if l.Permits != nil {
		a.Permits = *l.Permits
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applied = append(o.applied, a)
	if o.permits == nil {
		o.permits = map[string]int{}
	}
	o.permits[pod] = a.Permits
}

// Exited records that a pod's process has ended: its permits are free.
func (o *Observations) Exited(pod string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.permits, pod)
	delete(o.metrics, pod)
}

// TotalPermits returns the sum of the permits of the running pods: the
// in-flight calls the pods may make together.
func (o *Observations) TotalPermits() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, p := range o.permits {
		n += p
	}
	return n
}

// PermitsOf returns the sum of the permits the given pods last applied (what
// their gates enforce), and the permits of the one named laggard (0 when
// laggard is empty or not among them).
func (o *Observations) PermitsOf(pods []string, laggard string) (sum, ofLaggard int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range pods {
		sum += o.permits[p]
		if p == laggard {
			ofLaggard = o.permits[p]
		}
	}
	return sum, ofLaggard
}

// Acks returns the changes of the pods' acknowledgements so far.
func (o *Observations) Acks() []AckSample {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.acks)
}

// LastAcks returns each pod's latest applied annotation value.
func (o *Observations) LastAcks() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.lastAck)
}

// RolledOut says whether the quota's status counts every pod as having
// acknowledged the last published plan, and the applied annotation of every
// pod of running says so.
func (o *Observations) RolledOut(running []string) bool {
	pub, ro := o.Published(), o.Rollout()
	if len(pub) == 0 || len(ro) == 0 {
		return false
	}
	last, cur := pub[len(pub)-1], ro[len(ro)-1]
	if cur.Epoch != last.Epoch || cur.Revision != last.Revision || cur.Acknowledged != cur.Total {
		return false
	}
	acks := o.LastAcks()
	for _, pod := range running {
		if acks[pod] != last.Ack().String() {
			return false
		}
	}
	return true
}

// ack records pod's applied annotation for gate when it changed. A pod
// created again under its name (a StatefulSet's) has acknowledged nothing
// until its own annotation says so.
func (o *Observations) ack(seen time.Time, pod *corev1.Pod, gate string) {
	v, ok := pod.Annotations[v1alpha1.AppliedAnnotationPrefix+gate]
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lastAck == nil {
		o.lastAck, o.ackUID = map[string]string{}, map[string]types.UID{}
	}
	// A watch delivers a name's events in order, and one started again
	// lists only the Pods there are: a new UID is the name's new Pod.
	if uid, known := o.ackUID[pod.Name]; known && uid != pod.UID {
		delete(o.lastAck, pod.Name)
		delete(o.ackUID, pod.Name)
	}
	if !ok {
		return
	}
	o.ackUID[pod.Name] = pod.UID
	if o.lastAck[pod.Name] == v {
		return
	}
	o.lastAck[pod.Name] = v
	if a, err := plan.ParseAck(v); err == nil {
		o.acks = append(o.acks, AckSample{Seen: seen, Pod: pod.Name, Ack: a})
		if _, running := o.permits[pod.Name]; running && a.Released {
			// Its gate is closed and drained: it holds nothing any more,
			// though its process may take a moment to exit.
			o.permits[pod.Name] = 0
		}
	}
}

// WatchPods records the pods' acknowledgements of gate until ctx ends.
func (o *Observations) WatchPods(ctx context.Context, c client.WithWatch, namespace, gate string) {
	watchLoop(ctx, c, &corev1.PodList{}, []client.ListOption{client.InNamespace(namespace)}, func(obj client.Object) {
		if pod, ok := obj.(*corev1.Pod); ok {
			o.ack(time.Now(), pod, gate)
		}
	})
}

// publish records a ConfigMap's document of gate when its hash is new.
func (o *Observations) publish(seen time.Time, cm *corev1.ConfigMap, gate string) {
	data, ok := cm.Data[plan.KeyFor(gate)]
	if !ok {
		return
	}
	d, err := plan.Parse([]byte(data))
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.published); n > 0 && o.published[n-1].Hash == d.Hash {
		return
	}
	p := Published{Seen: seen, Hash: d.Hash, Epoch: d.Epoch, Revision: d.Revision, Permits: d.Permits,
		UnacknowledgedDelay: d.UnacknowledgedDelay()}
	if len(d.Pods) > 0 {
		p.Pods = make(map[string]int, len(d.Pods))
		for name, share := range d.Pods {
			p.Pods[name] = share.Permits
		}
	}
	o.published = append(o.published, p)
}

// Published returns the plans published so far, in order.
func (o *Observations) Published() []Published {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.published)
}

// AppliedPlans returns the pods' applications so far.
func (o *Observations) AppliedPlans() []Applied {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.applied)
}

// Rollout returns the quota's rollout samples so far.
func (o *Observations) Rollout() []RolloutSample {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.rollout)
}

// WatchConfigMap records every new plan of gate in the ConfigMap until ctx
// ends.
func (o *Observations) WatchConfigMap(ctx context.Context, c client.WithWatch, namespace, name, gate string) {
	watchLoop(ctx, c, &corev1.ConfigMapList{}, []client.ListOption{
		client.InNamespace(namespace), client.MatchingFields{"metadata.name": name},
	}, func(obj client.Object) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			o.publish(time.Now(), cm, gate)
		}
	})
}

// WatchQuota records the quota's rollout status until ctx ends.
func (o *Observations) WatchQuota(ctx context.Context, c client.WithWatch, namespace, name string) {
	watchLoop(ctx, c, &v1alpha1.DownstreamQuotaList{}, []client.ListOption{
		client.InNamespace(namespace), client.MatchingFields{"metadata.name": name},
	}, func(obj client.Object) {
		q, ok := obj.(*v1alpha1.DownstreamQuota)
		if !ok || q.Status.Rollout == nil {
			return
		}
		s := RolloutSample{Seen: time.Now(), Acknowledged: q.Status.Rollout.Acknowledged, Total: q.Status.Rollout.Total}
		if q.Status.ConfigMap != nil {
			s.Hash = q.Status.ConfigMap.Hash
		}
		if q.Status.Replicas != nil {
			s.Divisor = q.Status.Replicas.Divisor
		}
		if d := q.Status.Division; d != nil {
			s.Epoch, s.Revision = d.Epoch, d.Revision
			s.Usable, s.HandedOut, s.Held = d.Usable, d.HandedOut, d.Held
		}
		o.mu.Lock()
		o.rollout = append(o.rollout, s)
		o.mu.Unlock()
	})
}

// watchLoop calls fn with every object the watch delivers (the current ones
// first), and watches again when the API server ends a watch, until ctx ends.
func watchLoop(ctx context.Context, c client.WithWatch, list client.ObjectList, opts []client.ListOption, fn func(client.Object)) {
	for ctx.Err() == nil {
		w, err := c.Watch(ctx, list, opts...)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if obj, ok := ev.Object.(client.Object); ok {
				fn(obj)
			}
		}
		w.Stop()
	}
}
