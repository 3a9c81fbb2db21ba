package storm

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// Published is a plan the operator published, as the harness's watch of the
// ConfigMap first saw it.
type Published struct {
	Seen    time.Time
	Hash    string
	Permits int
}

// Applied is a pod putting a plan in force, from its "Applied plan" log line.
type Applied struct {
	Pod     string
	Time    time.Time
	Hash    string
	Permits int
}

// RolloutSample is the quota's status.rollout at one moment.
type RolloutSample struct {
	Seen         time.Time
	Hash         string
	Divisor      int32
	Acknowledged int32
	Total        int32
}

// Observations collects what the harness learns while a variant runs: the
// plans the operator publishes, the plans the pods apply, and the quota's
// rollout. It is safe for concurrent use.
type Observations struct {
	mu        sync.Mutex
	published []Published
	applied   []Applied
	rollout   []RolloutSample
	permits   map[string]int // running pod → the permits it last applied
}

// Applied records a pod's "Applied plan" log line.
func (o *Observations) Applied(pod string, l LogLine) {
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
	o.published = append(o.published, Published{Seen: seen, Hash: d.Hash, Permits: d.Permits})
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
