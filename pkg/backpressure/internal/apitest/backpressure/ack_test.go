package backpressure_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// One kube-apiserver and etcd serve every acknowledgement test; each works
// in its own namespace.
var controlPlane testenv.Shared

func TestMain(m *testing.M) { controlPlane.Main(m) }

const (
	ackPod  = "gateway-a"
	ackGate = "logistics-api"
	ackKey  = plan.AppliedAnnotationPrefix + ackGate
)

// ackFixture is a Runtime acknowledging on a real pod, with its plans in a
// directory the test writes.
type ackFixture struct {
	t       *testing.T
	client  kubernetes.Interface
	ns      string
	dir     string
	rt      *backpressure.Runtime
	events  *sharetest.Recorder
	stop    context.CancelFunc
	stopped chan error
}

func newAckFixture(t *testing.T, first plan.Document) *ackFixture {
	t.Helper()
	return newAckFixtureWith(t, first, nil)
}

// newAckFixtureWith is newAckFixture with the Runtime's options changed by
// edit, when not nil.
func newAckFixtureWith(t *testing.T, first plan.Document, edit func(*backpressure.Options)) *ackFixture {
	t.Helper()
	client, ns := controlPlane.Namespace(t, "runtime-ack")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ackPod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f := &ackFixture{t: t, client: client, ns: ns, dir: t.TempDir(), events: sharetest.NewRecorder(), stopped: make(chan error, 1)}
	sharetest.WritePlan(t, f.dir, first)
	opts := backpressure.Options{
		Gates:        []string{ackGate},
		OnApplied:    f.events.Hook,
		PodName:      ackPod,
		PodNamespace: ns,
		Ack: &backpressure.AckOptions{
			Client:  client,
			Backoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 200 * time.Millisecond},
		},
		DrainTimeout: 10 * time.Second,
	}
	if edit != nil {
		edit(&opts)
	}
	var err error
	if f.rt, err = backpressure.New(t.Context(), backpressure.FromDir(f.dir), opts); err != nil {
		t.Fatal(err)
	}
	f.events.Next(t)
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	go func() { f.stopped <- f.rt.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-f.stopped:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Start did not return")
		}
	})
	return f
}

// publish writes d and waits until the Runtime has put it in force.
func (f *ackFixture) publish(d plan.Document) {
	f.t.Helper()
	sharetest.WritePlan(f.t, f.dir, d)
	for {
		if x := f.events.Next(f.t); x.Share.Revision == d.Revision {
			return
		}
	}
}

// ack reads the pod's acknowledgement of the gate.
func (f *ackFixture) ack() string {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods(f.ns).Get(context.Background(), ackPod, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p.Annotations[ackKey]
}

// waitForAck waits until the pod carries want.
func (f *ackFixture) waitForAck(want string) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	got := f.ack()
	for got != want {
		if time.Now().After(deadline) {
			f.t.Fatalf("acknowledgement %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
		got = f.ack()
	}
}

// keepsAck fails unless the pod carries want throughout settle: long
// enough for many polls of the runtime and a patch round trip.
func (f *ackFixture) keepsAck(want string) {
	f.t.Helper()
	for end := time.Now().Add(settle); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := f.ack(); got != want {
			f.t.Fatalf("acknowledgement %q, want it to stay %q", got, want)
		}
	}
}

// hold acquires n permits of the gate.
func (f *ackFixture) hold(n int) []gate.Permit {
	f.t.Helper()
	held := make([]gate.Permit, n)
	for i := range held {
		var err error
		if held[i], err = sharetest.MustGate(f.t, f.rt, ackGate).TryAcquire(context.Background()); err != nil {
			f.t.Fatalf("permit %d of %d: %v", i+1, n, err)
		}
	}
	return held
}

// share returns revision rev of the gate's plan, giving ackPod the given
// permits and every other pod two.
func share(rev int64, permits int) plan.Document {
	return sharetest.Divided(2, rev, map[string]int{ackPod: permits, "gateway-b": 2})
}

const settle = 400 * time.Millisecond

// A smaller share is acknowledged only once the calls in flight are within
// it; a larger one at once.
func TestAckWaitsForAttrition(t *testing.T) {
	f := newAckFixture(t, share(1, 4))
	f.waitForAck("epoch-1/1")
	held := f.hold(4)

	f.publish(share(2, 1))
	f.keepsAck("epoch-1/1") // 4 in flight, 1 allowed
	held[0].Release()
	held[1].Release()
	f.keepsAck("epoch-1/1") // 2 in flight, 1 allowed
	held[2].Release()
	f.waitForAck("epoch-1/2") // 1 in flight: within the new share

	// A larger share needs no attrition, whatever is in flight.
	f.publish(share(3, 5))
	f.waitForAck("epoch-1/3")
	more := f.hold(4)
	// An equal share neither.
	f.publish(share(4, 5))
	f.waitForAck("epoch-1/4")
	held[3].Release()
	for i := range more {
		more[i].Release()
	}
}

// A newer revision supersedes one still waiting for attrition: the older
// one is never acknowledged, even once the calls in flight would fit it.
func TestAckNewerRevisionSupersedes(t *testing.T) {
	f := newAckFixture(t, share(1, 4))
	f.waitForAck("epoch-1/1")
	held := f.hold(4)

	f.publish(share(2, 1)) // waits for 1 in flight
	f.publish(share(3, 2)) // supersedes it: waits for 2
	f.keepsAck("epoch-1/1")
	held[0].Release()
	held[1].Release()
	f.waitForAck("epoch-1/3")
	held[2].Release()
	held[3].Release() // now within revision 2's share too
	f.keepsAck("epoch-1/3")

	// A larger share superseding a waiting smaller one is acknowledged at once.
	held = f.hold(2)
	f.publish(share(4, 0))
	f.keepsAck("epoch-1/3")
	f.publish(share(5, 3))
	f.waitForAck("epoch-1/5")
	for i := range held {
		held[i].Release()
	}
	f.keepsAck("epoch-1/5")
}

// When Start's context ends, the pod writes "<epoch>/released" only once its
// closed gate has nothing in flight, and before Start returns.
func TestReleaseOnShutdownAfterDrain(t *testing.T) {
	f := newAckFixture(t, share(1, 3))
	f.waitForAck("epoch-1/1")
	held := f.hold(2)

	f.stop()
	g := sharetest.MustGate(f.t, f.rt, ackGate)
	sharetest.Eventually(t, 5*time.Second, "the gate closes", func() bool {
		p, err := g.TryAcquire(context.Background())
		p.Release()
		return err != nil
	})
	held[0].Release()
	f.keepsAck("epoch-1/1") // one call still in flight
	select {
	case err := <-f.stopped:
		t.Fatalf("Start returned (%v) with a call in flight", err)
	default:
	}
	held[1].Release()
	select {
	case err := <-f.stopped:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after the gate drained")
	}
	f.stopped <- nil // for the cleanup
	// Written before Start returned: no waiting here.
	if got := f.ack(); got != "epoch-1/released" {
		t.Errorf("acknowledgement after Start returned = %q, want epoch-1/released", got)
	}
	if a, err := plan.ParseAck(f.ack()); err != nil || !a.Released || a.Epoch != "epoch-1" {
		t.Errorf("ParseAck = %+v, %v", a, err)
	}
}
