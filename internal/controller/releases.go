package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// releaseMemory is how long a release seen on a deleted pod is kept for a
// division step that finds the pod gone: far longer than a step takes to
// follow a pod's deletion.
const releaseMemory = 10 * time.Minute

// releases remembers the pods seen handing their share back
// ("<epoch>/released") while being deleted. The kubelet deletes a pod's
// object as soon as its process has ended, often before a division steps
// again: without this memory the step would find the pod gone, not knowing
// it released its share, and hold that share for the unacknowledged delay
// as for a force-deleted pod whose process might still call. What it
// remembers is what the pod itself said while it existed, as a step that
// had read the pod then would have counted it; a manager that restarts
// forgets it, and the delay applies again.
type releases struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]releasedPod
	// pruned is when pods was last swept for memories past releaseMemory:
	// sweeping at most every pruneEvery keeps a rollout of thousands of
	// pods from scanning the whole map at every deletion.
	pruned time.Time
	// now is the clock; nil is time.Now.
	now func() time.Time
}

// pruneEvery is how often the memory is swept: a memory lives at most
// releaseMemory plus this.
const pruneEvery = releaseMemory / 10

// releasedPod is what a deleted pod said it released: its acknowledgement
// annotations that say "released", by annotation.
type releasedPod struct {
	acks map[string]string
	seen time.Time
}

// observe remembers obj's releases when obj is a pod being deleted.
func (r *releases) observe(obj client.Object) {
	if r == nil || obj.GetDeletionTimestamp() == nil {
		return
	}
	acks := map[string]string{}
	for k, v := range appliedAnnotations(obj) {
		if a, err := plan.ParseAck(v); err == nil && a.Released {
			acks[k] = v
		}
	}
	if len(acks) == 0 {
		return
	}
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil {
		r.pods = map[types.NamespacedName]releasedPod{}
	}
	if now.Sub(r.pruned) >= pruneEvery {
		for k, p := range r.pods {
			if now.Sub(p.seen) > releaseMemory {
				delete(r.pods, k)
			}
		}
		r.pruned = now
	}
	r.pods[types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}] = releasedPod{acks: acks, seen: now}
}

// released returns the release of gate in epoch that the pod
// namespace/name said before it was deleted, if it said one.
func (r *releases) released(namespace, name, gate, epoch string) (plan.Ack, bool) {
	if r == nil {
		return plan.Ack{}, false
	}
	r.mu.Lock()
	p, ok := r.pods[types.NamespacedName{Namespace: namespace, Name: name}]
	r.mu.Unlock()
	if !ok {
		return plan.Ack{}, false
	}
	a, err := plan.ParseAck(p.acks[appliedAnnotation(gate)])
	if err != nil || !a.Released || a.Epoch != epoch {
		return plan.Ack{}, false
	}
	return a, true
}
