package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// laggingCache is a client whose ConfigMaps are read as a cache that has
// not yet seen the writes made since freeze: each one as it was then, none
// created since. Everything else, and every write, goes to the API server.
type laggingCache struct {
	client.WithWatch
	frozen map[client.ObjectKey]*corev1.ConfigMap
}

// freeze makes the ConfigMaps read as they are now, until thaw.
func (l *laggingCache) freeze(t *testing.T) {
	t.Helper()
	var list corev1.ConfigMapList
	if err := l.WithWatch.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	l.frozen = map[client.ObjectKey]*corev1.ConfigMap{}
	for i := range list.Items {
		l.frozen[client.ObjectKeyFromObject(&list.Items[i])] = list.Items[i].DeepCopy()
	}
}

// thaw lets the cache catch up with the API server.
func (l *laggingCache) thaw() { l.frozen = nil }

func (l *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || l.frozen == nil {
		return l.WithWatch.Get(ctx, key, obj, opts...)
	}
	old, seen := l.frozen[key]
	if !seen {
		return l.WithWatch.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name + "-not-in-the-cache-yet"}, obj, opts...)
	}
	old.DeepCopyInto(cm)
	return nil
}

func (l *laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	cms, ok := list.(*corev1.ConfigMapList)
	if !ok || l.frozen == nil {
		return l.WithWatch.List(ctx, list, opts...)
	}
	if err := l.WithWatch.List(ctx, cms, opts...); err != nil {
		return err
	}
	items := cms.Items[:0]
	for _, cm := range cms.Items {
		// As the cache has it (the index matched the API server's copy:
		// close enough for ConfigMaps that hold the gate at both times).
		if old, seen := l.frozen[client.ObjectKeyFromObject(&cm)]; seen {
			items = append(items, *old.DeepCopy())
		}
	}
	cms.Items = items
	return nil
}

// failingApplies is a client whose next fail server-side applies (the
// publications of a gate's document) fail, as when the API server is
// briefly unreachable.
type failingApplies struct {
	client.WithWatch
	fail int
}

func (f *failingApplies) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if f.fail > 0 {
		f.fail--
		return errors.New("the API server is unreachable")
	}
	return f.WithWatch.Apply(ctx, obj, opts...)
}

// namesakeWorld is the quota shop/payments (40 usable) over the
// StatefulSet api, pods api-0 and api-1 enforcing 20 each, with a reconciler
// whose cache of ConfigMaps can lag behind its own publications while the
// pods read the API server's.
type namesakeWorld struct {
	env     *fakeEnv
	cache   *laggingCache
	applies *failingApplies
	w       *podWorld
}

func newNamesakeWorld(t *testing.T) *namesakeWorld {
	t.Helper()
	q := fakeQuota(inlineGate, "StatefulSet", "api")
	q.Spec.Demand = nil
	env := newFakeEnv(fakeStatefulSet("api", 2), guardPod("shop", "api", "api-0"), guardPod("shop", "api", "api-1"), q)
	cache := &laggingCache{WithWatch: env.client}
	applies := &failingApplies{WithWatch: cache}
	env.pub = NewPublisher(applies, env.client, env.recorder, WithClock(env.clock), WithClockID("test"))
	env.r = NewDownstreamQuotaReconciler(env.pub)
	s := &namesakeWorld{env: env, cache: cache, applies: applies, w: newPodWorld(t, env.client)}
	s.w.start("shop", "api-0", inlineGate, inlineCM, true)
	s.w.start("shop", "api-1", inlineGate, inlineCM, true)
	s.rounds(t, 2, "setup")
	if a, b := s.w.permits("shop", "api-0", inlineGate), s.w.permits("shop", "api-1", inlineGate); a != 20 || b != 20 {
		t.Fatalf("setup: api-0 and api-1 enforce %d and %d, want 20 each", a, b)
	}
	return s
}

// step reconciles the quota once and checks the record it wrote: the pods
// it counts hold no more than the usable permits together.
func (s *namesakeWorld) step(t *testing.T, when string) reconcile.Result {
	t.Helper()
	res := s.env.reconcileInline(t)
	d := quotaStatus(t, s.env, inlineGate).Division
	if d == nil {
		t.Fatalf("%s: no status.division", when)
	}
	if d.Held > d.Usable {
		t.Fatalf("%s: status.division.held = %d > %d usable (handed out %d); holding %+v", when, d.Held, d.Usable, d.HandedOut, d.Holding)
	}
	return res
}

// rounds runs n rounds: a reconcile, every pod reading and settling.
func (s *namesakeWorld) rounds(t *testing.T, n int, phase string) {
	t.Helper()
	for i := range n {
		when := fmt.Sprintf("%s round %d", phase, i)
		s.step(t, when)
		s.w.read("shop", inlineGate)
		s.w.check(inlineUsable, when+", pods read")
		s.w.settle("shop", inlineGate)
		s.w.check(inlineUsable, when+", pods settled")
	}
}

// TestRecreatedPodIsNotCreditedWithItsNamesakesShare deletes api-1 of a
// StatefulSet as `kubectl delete pod` does: it releases its share and goes,
// its share goes to api-0, and the StatefulSet controller creates api-1
// again under its name with a new UID. The reconcile that finds the new
// api-1 runs before the reconciler's cache of ConfigMaps has its own last
// publication: the cache still shows the document that gave the old api-1
// its 20. The new api-1 reads the API server's document, which gives it
// nothing; the record must not count the old api-1's 20 for it on top of
// api-0's 40.
func TestRecreatedPodIsNotCreditedWithItsNamesakesShare(t *testing.T) {
	s := newNamesakeWorld(t)
	// api-1 releases its share while being deleted; its process ends and
	// its object goes.
	s.release(t)

	// The step that takes api-1 out of the document records and publishes
	// it, and asks to run again soon: nothing else wakes the quota. The
	// next gives api-1's share to api-0, as the document no longer gives
	// the name anything. The cache sees neither publication.
	s.cache.freeze(t)
	if res := s.step(t, "api-1 released and gone"); res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Fatalf("the step that took the released api-1 out of the document asks to run again after %v, want within a second", res.RequeueAfter)
	}
	s.step(t, "api-1 out of the document")
	s.w.read("shop", inlineGate)
	s.w.settle("shop", inlineGate)
	s.w.check(inlineUsable, "api-1 released and gone, pods read")
	if a := s.w.permits("shop", "api-0", inlineGate); a != 40 {
		t.Fatalf("api-0 enforces %d once api-1 released its share, want 40", a)
	}

	// The StatefulSet controller creates api-1 again: a new pod, not Ready
	// yet, whose process reads the API server's document.
	s.recreate(t, nil)
	s.step(t, "api-1 created again, the cache behind")
	s.w.read("shop", inlineGate)
	s.w.check(inlineUsable, "api-1 created again, pods read")

	// The cache catches up; the new api-1 becomes Ready and gets its share
	// as api-0 lets go of it.
	s.cache.thaw()
	s.settleNamesake(t)
}

// release has api-1 release its share while being deleted, as `kubectl
// delete pod` makes it: its process ends and its object goes.
func (s *namesakeWorld) release(t *testing.T) {
	t.Helper()
	releaseAndGo(t, s.env, s.w, "api", "api-1")
}

// recreate creates api-1 again as the StatefulSet controller does, a new
// pod under the old one's name, not Ready yet, and starts its process,
// which reads its gate's document from the API server, or, when read is
// not nil, has read that one: its kubelet's copy of the ConfigMap is behind.
func (s *namesakeWorld) recreate(t *testing.T, read *plan.Document) {
	t.Helper()
	again := guardPod("shop", "api", "api-1")
	again.UID = types.UID("uid-shop-api-1-again")
	again.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if err := s.env.client.Create(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	proc := &process{configMap: inlineCM, acks: true}
	s.w.procs[procKey{"shop", "api-1", inlineGate}] = proc
	if read == nil {
		s.w.read("shop", inlineGate, "api-1")
		return
	}
	proc.doc, proc.permits = read, read.For("api-1").Permits
	proc.inFlight = proc.permits
}

// published returns the document of the gate the API server holds.
func (s *namesakeWorld) published(t *testing.T) plan.Document {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := s.env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: inlineCM}, cm); err != nil {
		t.Fatal(err)
	}
	d, ok := documentIn(cm, inlineGate)
	if !ok {
		t.Fatalf("configmap %s holds no document of %s", inlineCM, inlineGate)
	}
	return d
}

// settleNamesake runs rounds until the new api-1 is Ready and api-0 and
// api-1 enforce 20 each, checking at every read that the pods may hold no
// more than the usable permits together.
func (s *namesakeWorld) settleNamesake(t *testing.T) {
	t.Helper()
	s.rounds(t, 2, "api-1 created again")
	setPodReady(t, s.env, "api-1", true)
	s.rounds(t, 4, "api-1 Ready")
	if a, b := s.w.permits("shop", "api-0", inlineGate), s.w.permits("shop", "api-1", inlineGate); a != 20 || b != 20 {
		t.Errorf("api-0 and api-1 enforce %d and %d once the new api-1 is Ready, want 20 each", a, b)
	}
}

// TestReleasedShareWaitsForAFailedPublication deletes api-1 as `kubectl
// delete pod` does: it releases its share and goes. The publication of the
// step that takes it out of the document fails, so the ConfigMap still
// gives api-1 its 20 when the StatefulSet controller creates api-1 again and
// its process reads it. api-0 must not be told 40 while that document is
// what the name api-1 reads: the new api-1 enforces it until it reads a
// newer one, however late its kubelet delivers that.
func TestReleasedShareWaitsForAFailedPublication(t *testing.T) {
	s := newNamesakeWorld(t)
	s.release(t)

	s.applies.fail = 1
	if _, err := s.env.r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "shop", Name: inlineGate}}); err == nil {
		t.Fatal("the reconcile whose publication failed returned no error")
	}
	if d := s.published(t); d.For("api-1").Permits != 20 {
		t.Fatalf("after the failed publication the ConfigMap gives api-1 %d, want its old 20", d.For("api-1").Permits)
	}
	s.recreate(t, nil)
	s.w.check(inlineUsable, "api-1 created again, reading the document of before")
	if b := s.w.permits("shop", "api-1", inlineGate); b != 20 {
		t.Fatalf("the new api-1 enforces %d from the document it read, want 20", b)
	}

	// The retry publishes; api-0 reads at once, the new api-1's kubelet
	// is slow to deliver.
	s.onlyAPI0Reads(t, "retry")
	s.settleNamesake(t)
}

// TestReleasedShareWaitsForAKubeletBehind is the same deletion with every
// publication through, but the kubelet of the new api-1 gives its process
// the ConfigMap as it was before the step that took api-1 out of it: the
// document that gave api-1 20.
func TestReleasedShareWaitsForAKubeletBehind(t *testing.T) {
	s := newNamesakeWorld(t)
	before := s.published(t)
	s.release(t)

	s.step(t, "api-1 released and gone")
	s.w.read("shop", inlineGate, "api-0")
	s.w.settle("shop", inlineGate, "api-0")
	s.w.check(inlineUsable, "api-1 released and gone, api-0 read")
	s.recreate(t, &before)
	s.w.check(inlineUsable, "api-1 created again, its kubelet behind")

	s.onlyAPI0Reads(t, "step")
	s.settleNamesake(t)
}

// onlyAPI0Reads runs three steps after which api-0 reads and settles while
// the new api-1's kubelet delivers nothing, checking at every read that the
// pods may hold no more than the usable permits together.
func (s *namesakeWorld) onlyAPI0Reads(t *testing.T, phase string) {
	t.Helper()
	for i := range 3 {
		when := fmt.Sprintf("%s %d, api-1's kubelet behind", phase, i)
		s.step(t, when)
		s.w.read("shop", inlineGate, "api-0")
		s.w.settle("shop", inlineGate, "api-0")
		s.w.check(inlineUsable, when)
	}
}
