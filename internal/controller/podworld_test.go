package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// podWorld plays the pods' side of the handover in the unit tests,
// independently of the operator's own record: each pod's process reads its
// gates' documents from the ConfigMap it was started with and accepts a
// document by the runtime's rules (a document of an epoch it enforced with
// an older revision is refused), and may have in flight the permits of the
// document it accepted, or more: after a smaller share, the calls above it
// finish only when the test says so (drain, or ack for a pod that
// acknowledges). A process outlives its pod object: a force-deleted pod's
// process runs until the test ends it. What the pods may have in flight
// together is what the checks compare with the contract.
type podWorld struct {
	t     *testing.T
	c     client.Client
	procs map[procKey]*process
}

// procKey is one gate of one pod's process.
type procKey struct{ namespace, pod, gate string }

// process is one gate of one pod's process.
type process struct {
	configMap string
	acks      bool // acknowledges what it enforces once its calls fit
	doc       *plan.Document
	seen      map[string]int64 // the newest revision of each epoch it accepted
	permits   int              // the accepted document's share for this pod
	inFlight  int              // the most it may have in flight: at least permits
	ended     bool
}

func newPodWorld(t *testing.T, c client.Client) *podWorld {
	return &podWorld{t: t, c: c, procs: map[procKey]*process{}}
}

// start starts the gate of a pod's process, reading configMap; acks says
// whether it acknowledges.
func (w *podWorld) start(namespace, pod, gate, configMap string, acks bool) {
	w.procs[procKey{namespace, pod, gate}] = &process{configMap: configMap, acks: acks}
}

// read makes the listed processes (all of gate's in namespace when none is
// listed) read their ConfigMap and accept what the runtime accepts.
func (w *podWorld) read(namespace, gate string, pods ...string) {
	w.t.Helper()
	for _, k := range w.keys(namespace, gate, pods) {
		p := w.procs[k]
		if p.ended {
			continue
		}
		cm := &corev1.ConfigMap{}
		err := w.c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: p.configMap}, cm)
		if apierrors.IsNotFound(err) {
			continue // the runtime keeps its last plan
		}
		if err != nil {
			w.t.Fatal(err)
		}
		data, ok := cm.Data[plan.KeyFor(gate)]
		if !ok {
			continue // an orphaned gate keeps its last plan
		}
		d, err := plan.Parse([]byte(data))
		if err != nil {
			w.t.Fatalf("%s/%s reads %s: %v", namespace, p.configMap, gate, err)
		}
		if d.Revision < p.seen[d.Epoch] || p.doc != nil && d.Epoch == p.doc.Epoch && d.Revision == p.doc.Revision && d.Hash != p.doc.Hash {
			// An older revision of an epoch it enforced, or the same
			// revision with other content: the runtime remembers each
			// epoch's newest revision, and puts no revision in force
			// twice.
			continue
		}
		if p.seen == nil {
			p.seen = map[string]int64{}
		}
		p.doc, p.seen[d.Epoch] = &d, max(p.seen[d.Epoch], d.Revision)
		p.permits = d.For(k.pod).Permits
		p.inFlight = max(p.inFlight, p.permits)
	}
}

// settle lets the calls of the listed processes (all of the gate's when
// none is listed) above their share finish, and has those that acknowledge
// annotate their pod with what they enforce.
func (w *podWorld) settle(namespace, gate string, pods ...string) {
	w.t.Helper()
	for _, k := range w.keys(namespace, gate, pods) {
		p := w.procs[k]
		if p.ended || p.doc == nil {
			continue
		}
		p.inFlight = p.permits
		if p.acks {
			w.annotate(k, plan.AckFor(*p.doc).String())
		}
	}
}

// drain lets the calls above their share finish without acknowledging: a
// process that does not acknowledge, once its calls' deadlines passed.
func (w *podWorld) drain(namespace, gate string, pods ...string) {
	for _, k := range w.keys(namespace, gate, pods) {
		if p := w.procs[k]; !p.ended && p.doc != nil {
			p.inFlight = p.permits
		}
	}
}

// end ends the listed processes: they have nothing in flight any more.
func (w *podWorld) end(namespace, gate string, pods ...string) {
	for _, k := range w.keys(namespace, gate, pods) {
		w.procs[k].ended, w.procs[k].inFlight = true, 0
	}
}

// annotate writes the acknowledgement value on the pod, when it exists.
func (w *podWorld) annotate(k procKey, value string) {
	w.t.Helper()
	pod := &corev1.Pod{}
	err := w.c.Get(context.Background(), client.ObjectKey{Namespace: k.namespace, Name: k.pod}, pod)
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if value == "" {
		delete(pod.Annotations, appliedAnnotation(k.gate))
	} else {
		pod.Annotations[appliedAnnotation(k.gate)] = value
	}
	if err := w.c.Update(context.Background(), pod); err != nil {
		w.t.Fatal(err)
	}
}

// inFlight is the most the processes may have in flight together, and each
// one's part, "<namespace>/<pod>/<gate>=n".
func (w *podWorld) inFlight() (int, string) {
	total := 0
	var parts []string
	for _, k := range slices.SortedFunc(maps.Keys(w.procs), func(a, b procKey) int {
		return strings.Compare(a.namespace+"/"+a.pod+"/"+a.gate, b.namespace+"/"+b.pod+"/"+b.gate)
	}) {
		p := w.procs[k]
		if p.ended {
			continue
		}
		total += p.inFlight
		parts = append(parts, fmt.Sprintf("%s/%s/%s=%d", k.namespace, k.pod, k.gate, p.inFlight))
	}
	return total, strings.Join(parts, " ")
}

// check fails the test when the processes may have more in flight than
// usable.
func (w *podWorld) check(usable int, when string) {
	w.t.Helper()
	if total, parts := w.inFlight(); total > usable {
		w.t.Fatalf("%s: the pods may have %d calls in flight > %d usable: %s", when, total, usable, parts)
	}
}

// permits returns the share the process enforces.
func (w *podWorld) permits(namespace, pod, gate string) int {
	p := w.procs[procKey{namespace, pod, gate}]
	if p == nil || p.ended {
		return 0
	}
	return p.permits
}

func (w *podWorld) keys(namespace, gate string, pods []string) []procKey {
	var out []procKey
	if len(pods) == 0 {
		for k := range w.procs {
			if k.namespace == namespace && k.gate == gate {
				out = append(out, k)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].pod < out[j].pod })
		return out
	}
	for _, pod := range pods {
		k := procKey{namespace, pod, gate}
		if _, ok := w.procs[k]; !ok {
			w.t.Fatalf("no process %s/%s for gate %s", namespace, pod, gate)
		}
		out = append(out, k)
	}
	return out
}

// advanceFake moves a fake environment's clock on.
func advanceFake(env *fakeEnv, d time.Duration) { env.clock.SetTime(env.clock.Now().Add(d)) }
