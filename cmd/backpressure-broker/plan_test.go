package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// One kube-apiserver and etcd serve the tests that read the plan; each
// works in its own namespace.
var controlPlane testenv.Shared

func TestMain(m *testing.M) { controlPlane.Main(m) }

const (
	planGate      = "logistics-api"
	planConfigMap = "gateway-backpressure"
	brokerPod     = "gateway-broker-7c9f-x2k4q"
	planAckKey    = plan.AppliedAnnotationPrefix + planGate
	// planMaxLease is the server's longest lease and learning time: long
	// enough that the leases of a step outlive it on a busy machine.
	planMaxLease = 4 * time.Second
)

// planDoc is revision rev of the quota's plan: the workload's pods hold
// 2 each, the broker pod slice permits (named when permits >= 0).
func planDoc(rev int64, slice int) plan.Document {
	d := plan.Document{
		Version: plan.CurrentVersion, Gate: planGate, Downstream: "logistics.example.com", Generation: 1,
		Epoch: "epoch-1", Revision: rev,
		Permits: 0, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.2,
		LatencySeconds: 0.05, DeadlineSeconds: 2,
		Pods: map[string]plan.PodShare{"gateway-a": {Permits: 2, QueueCapacity: 2, RetryBudgetPerSecond: 1}},
	}
	if slice >= 0 {
		d.Pods[brokerPod] = plan.PodShare{Permits: slice}
	}
	d.Hash = plan.Hash(d)
	return d
}

// planFixture is the broker, run in process, reading its slice from a
// ConfigMap of a real API server and acknowledging on its own pod there.
type planFixture struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	ns     string
	s      *server
	c      reservev1.ReserveClient
	stop   context.CancelFunc
	done   chan error
}

func newPlanFixture(t *testing.T, first plan.Document) *planFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	client, ns := controlPlane.Namespace(t, "broker-plan")
	f := &planFixture{t: t, ctx: ctx, client: client, ns: ns}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: brokerPod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "example.com/backpressure-broker:1"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.publish(first)
	env := map[string]string{"POD_NAME": brokerPod, "POD_NAMESPACE": ns}
	cfg, err := parseConfig([]string{
		"--gate", planGate, "--configmap", planConfigMap, "--acknowledge",
		"--kubeconfig", kubeconfigFor(t, controlPlane.Config(t)),
		"--max-lease", planMaxLease.String(), "--lease-margin", "10ms",
		"--listen-address", "127.0.0.1:0", "--metrics-listen", "",
	}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, stop, result := startInProcess(ctx, t, cfg)
	f.s = s
	f.stop, f.done = stop, result
	t.Cleanup(func() {
		stop()
		select {
		case err := <-result:
			if err != nil {
				t.Errorf("the broker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the broker did not stop")
		}
	})
	f.c = reservev1.NewReserveClient(dial(t, f.s.addr()))
	return f
}

// kubeconfigFor writes cfg's server and credentials as a kubeconfig file,
// for the server's --kubeconfig.
func kubeconfigFor(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// publish writes d into the quota's ConfigMap, as the operator does.
func (f *planFixture) publish(d plan.Document) {
	f.t.Helper()
	data, err := plan.Marshal(d)
	if err != nil {
		f.t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: planConfigMap}, Data: map[string]string{plan.KeyFor(planGate): string(data)}}
	if _, err := f.client.CoreV1().ConfigMaps(f.ns).Update(f.ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err := f.client.CoreV1().ConfigMaps(f.ns).Create(f.ctx, cm, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// ack reads the broker pod's acknowledgement of the quota.
func (f *planFixture) ack() string {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods(f.ns).Get(f.ctx, brokerPod, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p.Annotations[planAckKey]
}

// waitForAck waits (10s at most) until the pod carries want.
func (f *planFixture) waitForAck(want string) {
	f.t.Helper()
	waitUntil(f.t, "acknowledgement "+want, func() bool { return f.ack() == want })
}

// keepsAck fails unless the pod carries want for half a second: many polls
// of the acknowledger and a patch round trip.
func (f *planFixture) keepsAck(want string) {
	f.t.Helper()
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if got := f.ack(); got != want {
			f.t.Fatalf("acknowledgement %q, want it to stay %q", got, want)
		}
	}
}

// borrow asks for one permit, answering at once; nil when refused, with
// the refusal's reason.
func (f *planFixture) borrow() (*reservev1.Lease, reservev1.Reason) {
	f.t.Helper()
	resp, err := f.c.Borrow(f.ctx, &reservev1.BorrowRequest{Gate: planGate, Pod: "gateway-a", Hold: durationpb.New(planMaxLease - time.Second)})
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.GetLease(), resp.GetRefusal().GetReason()
}

// borrowN borrows n permits, failing on a refusal.
func (f *planFixture) borrowN(n int) []*reservev1.Lease {
	f.t.Helper()
	leases := make([]*reservev1.Lease, n)
	for i := range leases {
		l, reason := f.borrow()
		if l == nil {
			f.t.Fatalf("borrow %d of %d refused: %s", i+1, n, reason)
		}
		leases[i] = l
	}
	return leases
}

// refused fails unless a borrow is refused for reason.
func (f *planFixture) refused(want reservev1.Reason) {
	f.t.Helper()
	if l, reason := f.borrow(); l != nil || reason != want {
		f.t.Fatalf("borrow: lease %v, refusal %s; want refused %s", l, reason, want)
	}
}

// give returns leases.
func (f *planFixture) give(leases ...*reservev1.Lease) {
	f.t.Helper()
	for _, l := range leases {
		resp, err := f.c.Return(f.ctx, &reservev1.ReturnRequest{Gate: planGate, Incarnation: l.GetIncarnation(), Id: l.GetId()})
		if err != nil || !resp.GetReturned() {
			f.t.Fatalf("return: %v, %v", resp, err)
		}
	}
}

// TestSliceFromThePlan: the broker lends the slice the quota's published
// plan gives its pod, acknowledges a smaller slice only once its leases
// fit in it and never while it learns, lends a larger one at once, and on
// shutdown releases its slice once its leases have ended.
func TestSliceFromThePlan(t *testing.T) {
	f := newPlanFixture(t, planDoc(1, -1))

	// Learning: nothing lent and nothing acknowledged, not even a plan
	// that does not name the pod, since an earlier run may have lent.
	learningUntil := f.s.broker.LearningUntil()
	f.refused(reservev1.Reason_REASON_LEARNING)
	for time.Now().Before(learningUntil.Add(-200 * time.Millisecond)) {
		if got := f.ack(); got != "" {
			t.Fatalf("acknowledged %q %v before learning ended", got, time.Until(learningUntil))
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.waitForAck("epoch-1/1")
	f.refused(reservev1.Reason_REASON_EXHAUSTED) // not named: a slice of 0

	// A slice of 4: four lent, the fifth refused.
	f.publish(planDoc(2, 4))
	f.waitForAck("epoch-1/2")
	leases := f.borrowN(4)
	f.refused(reservev1.Reason_REASON_EXHAUSTED)

	// Cut to 2 with 4 out: nothing lent, nothing acknowledged until two
	// have been returned.
	f.publish(planDoc(3, 2))
	waitUntil(t, "the slice of 2 in force", func() bool { return f.s.broker.Stats()[0].Capacity == 2 })
	f.refused(reservev1.Reason_REASON_EXHAUSTED)
	f.keepsAck("epoch-1/2")
	f.give(leases[0])
	f.refused(reservev1.Reason_REASON_EXHAUSTED) // 3 out of 2
	f.keepsAck("epoch-1/2")
	f.give(leases[1])
	f.waitForAck("epoch-1/3")
	f.refused(reservev1.Reason_REASON_EXHAUSTED) // 2 out of 2

	// Grown to 6: four more at once, with two still out.
	f.publish(planDoc(4, 6))
	waitUntil(t, "the slice of 6 in force", func() bool { return f.s.broker.Stats()[0].Capacity == 6 })
	more := f.borrowN(4)
	f.refused(reservev1.Reason_REASON_EXHAUSTED)
	f.waitForAck("epoch-1/4")

	// Leaving: lends nothing, and releases only once the leases ended.
	f.stop()
	waitUntil(t, "lending stopped", func() bool { return f.s.broker.Stats()[0].Capacity == 0 })
	f.give(append(leases[2:], more[:3]...)...)
	f.keepsAck("epoch-1/4") // one lease out
	select {
	case err := <-f.done:
		t.Fatalf("the broker stopped (%v) with a lease out", err)
	default:
	}
	f.give(more[3])
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the broker did not stop once its leases had ended")
	}
	f.done <- nil // for the cleanup
	if got := f.ack(); got != "epoch-1/released" {
		t.Errorf("acknowledgement once stopped = %q, want epoch-1/released", got)
	}
}
