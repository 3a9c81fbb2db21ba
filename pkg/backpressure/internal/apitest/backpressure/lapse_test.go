package backpressure_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// cutter is a TCP proxy on 127.0.0.1 in front of the API server: closing it
// cuts every connection through it and refuses new ones, as a partition of
// the pod from the API server does; open listens on the same port again.
type cutter struct {
	t        *testing.T
	addr     string
	upstream string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, upstream string) *cutter {
	c := &cutter{t: t, upstream: upstream, conns: map[net.Conn]bool{}}
	c.open("127.0.0.1:0")
	t.Cleanup(func() { c.cut(); c.wg.Wait() })
	return c
}

func (c *cutter) open(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.ln, c.addr = ln, ln.Addr().String()
	c.mu.Unlock()
	c.wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.DialTimeout("tcp", c.upstream, 5*time.Second)
			if err != nil {
				_ = down.Close()
				continue
			}
			if !c.track(down, up) {
				continue
			}
			c.wg.Go(func() { _, _ = io.Copy(up, down); _ = up.Close(); _ = down.Close() })
			c.wg.Go(func() { _, _ = io.Copy(down, up); _ = up.Close(); _ = down.Close() })
		}
	})
}

// track keeps down and up to be cut, or closes them when the proxy is cut.
func (c *cutter) track(down, up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln == nil {
		_, _ = down.Close(), up.Close()
		return false
	}
	c.conns[down], c.conns[up] = true, true
	return true
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		_ = c.ln.Close()
		c.ln = nil
	}
	for conn := range c.conns {
		_ = conn.Close()
	}
	clear(c.conns)
}

func (c *cutter) reopen() { c.open(c.addr) }

const (
	lapseGate   = "logistics-api"
	silentPod   = "gateway-silent"
	ackingPod   = "gateway-acking"
	lapseDelay  = 3 * time.Second
	lapseMargin = 500 * time.Millisecond
	// lapseLimit is what a gate that does not acknowledge goes without its
	// source before it lapses: the delay less the margin and the deadline.
	lapseLimit = lapseDelay - lapseMargin - 500*time.Millisecond
)

// lapseDoc is the published plan: permits for every pod, the operator's
// delay of lapseDelay, a deadline of half a second.
func lapseDoc(permits int, revision int64) plan.Document {
	d := sharetest.Doc(lapseGate, permits)
	d.Revision, d.DeadlineSeconds, d.UnacknowledgedDelaySeconds = revision, 0.5, lapseDelay.Seconds()
	d.Hash = plan.Hash(d)
	return d
}

func putConfigMap(t *testing.T, client kubernetes.Interface, ns string, d plan.Document) {
	t.Helper()
	data, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gateway-backpressure"}, Data: map[string]string{plan.KeyFor(lapseGate): string(data)}}
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// startRuntime starts a Runtime of pod reading the ConfigMap through
// client, acknowledging when ack is set; the test's end stops it.
func startRuntime(t *testing.T, client kubernetes.Interface, ns, pod string, ack bool, reg prometheus.Registerer) *backpressure.Runtime {
	t.Helper()
	opts := backpressure.Options{
		Gates: []string{lapseGate}, PodName: pod, PodNamespace: ns, Registerer: reg,
		SourceLapseMargin: lapseMargin, DrainTimeout: 5 * time.Second, ReleaseTimeout: time.Second,
	}
	if ack {
		opts.Ack = &backpressure.AckOptions{Client: client, Backoff: wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 200 * time.Millisecond}}
	}
	rt, err := backpressure.New(t.Context(), backpressure.FromConfigMap(client, ns, "gateway-backpressure"), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			// The proxy is back by now (cleanups run last first), so
			// the acknowledging pod's release goes through.
			if err != nil {
				t.Errorf("Runtime of %s: %v", pod, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Runtime of %s did not stop", pod)
		}
	})
	return rt
}

// lapseGateOf returns rt's gate.
func lapseGateOf(t *testing.T, rt *backpressure.Runtime) *gate.Gate {
	t.Helper()
	g, err := rt.Gate(lapseGate)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// admits reports whether the gate of rt admits a call now.
func admits(t *testing.T, rt *backpressure.Runtime) bool {
	t.Helper()
	p, err := lapseGateOf(t, rt).TryAcquire(context.Background())
	if err != nil {
		return false
	}
	p.Release()
	return true
}

func permitsOf(t *testing.T, rt *backpressure.Runtime) int {
	t.Helper()
	return lapseGateOf(t, rt).Limits().Permits
}

// TestGateThatDoesNotAcknowledgeLapsesWithoutItsSource reads one ConfigMap
// through a proxy in two pods, one that acknowledges and one that does
// not, and cuts the proxy: the pod that does not acknowledge admits
// nothing once its source has been cut off for the delay less the margin
// and the deadline, and no sooner; the pod that acknowledges keeps its
// share. Once the proxy is back, the first pod enforces the plan published
// meanwhile, and never its old share again.
func TestGateThatDoesNotAcknowledgeLapsesWithoutItsSource(t *testing.T) {
	admin, ns := controlPlane.Namespace(t, "runtime-lapse")
	for _, name := range []string{silentPod, ackingPod} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	putConfigMap(t, admin, ns, lapseDoc(4, 10))

	cfg := controlPlane.Config(t)
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutter(t, u.Host)
	u.Host = proxy.addr
	cfg.Host = u.String()
	through := kubernetes.NewForConfigOrDie(cfg)

	silentReg, ackingReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	silent := startRuntime(t, through, ns, silentPod, false, silentReg)
	acking := startRuntime(t, through, ns, ackingPod, true, ackingReg)
	sharetest.Eventually(t, 10*time.Second, "the acknowledging pod acknowledges revision 10", func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), ackingPod, metav1.GetOptions{})
		return err == nil && p.Annotations[plan.AppliedAnnotationPrefix+lapseGate] == "epoch-1/10"
	})
	// The annotation is on the pod before the patch's answer is back at the
	// pod; cut then, and the pod, which never saw its acknowledgement land,
	// rightly counts itself as not acknowledging.
	sharetest.Eventually(t, 10*time.Second, "the acknowledging pod sees its acknowledgement land", func() bool {
		acks, _ := sharetest.MetricValue(t, ackingReg, "backpressure_config_acknowledgements_total", "result", "success")
		return acks >= 1
	})
	if !admits(t, silent) || !admits(t, acking) || permitsOf(t, silent) != 4 {
		t.Fatalf("before the cut: silent admits %v with %d permits, acking admits %v; want both admitting 4", admits(t, silent), permitsOf(t, silent), admits(t, acking))
	}

	proxy.cut()
	cut := time.Now()
	// Meanwhile the operator publishes a smaller share that neither pod
	// can read; counting from now, it gives the rest away after lapseDelay.
	putConfigMap(t, admin, ns, lapseDoc(1, 11))
	if ok, early := admits(t, silent), time.Since(cut) < lapseLimit; early && !ok {
		t.Fatalf("the silent pod stopped admitting %v after the cut, before the limit %v", time.Since(cut), lapseLimit)
	}
	sharetest.Eventually(t, lapseLimit+5*time.Second, "the silent pod lapses", func() bool { return !admits(t, silent) })
	if waited := time.Since(cut); waited < lapseLimit || waited > lapseDelay {
		t.Errorf("the silent pod lapsed %v after the cut, want within [%v, %v]", waited, lapseLimit, lapseDelay)
	}
	lapsed := func(reg *prometheus.Registry) float64 {
		if v, ok := sharetest.MetricValue(t, reg, "backpressure_plan_source_lapsed", "", ""); ok {
			return v
		}
		return -1
	}
	if permitsOf(t, silent) != 0 || lapsed(silentReg) != 1 {
		t.Errorf("lapsed silent pod: %d permits, backpressure_plan_source_lapsed %v; want 0 and 1", permitsOf(t, silent), lapsed(silentReg))
	}
	// Past the operator's delay the acknowledging pod still has its share:
	// the operator waits for its acknowledgement of revision 11.
	time.Sleep(time.Until(cut.Add(lapseDelay + 500*time.Millisecond)))
	if !admits(t, acking) || permitsOf(t, acking) != 4 || lapsed(ackingReg) == 1 {
		t.Errorf("acknowledging pod after the delay: admits %v with %d permits, lapsed %v; want its 4", admits(t, acking), permitsOf(t, acking), lapsed(ackingReg))
	}

	// Back: the silent pod enforces revision 11 at once, never 4 again.
	var (
		stop  = make(chan struct{})
		seen  = map[int]bool{}
		watch sync.WaitGroup
	)
	g := lapseGateOf(t, silent)
	watch.Go(func() {
		for {
			seen[g.Limits().Permits] = true
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	proxy.reopen()
	sharetest.Eventually(t, 15*time.Second, "the silent pod enforces revision 11", func() bool {
		s, err := silent.Share(lapseGate)
		return err == nil && s.Revision == 11 && s.Limits.Permits == 1 && admits(t, silent)
	})
	close(stop)
	watch.Wait()
	if seen[4] {
		t.Errorf("the silent pod enforced its old 4 permits after the source came back; saw %v", seen)
	}
	if lapsed(silentReg) != 0 {
		t.Errorf("backpressure_plan_source_lapsed %v once back, want 0", lapsed(silentReg))
	}
}
