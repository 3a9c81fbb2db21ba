package perf

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// TestColdStart creates quotas over workloads (by default 2,000 over 200,
// in 10 namespaces; each workload a Deployment of 4 replicas with 4 pods and
// an HPA) before the operator starts, then starts it and measures the time
// until every quota is Ready, the API writes it issued, the events it
// recorded and its peak memory. It then restarts the operator over the
// published state and counts the writes of that full resync, which must be
// none.
func TestColdStart(t *testing.T) {
	requirePerf(t)
	workloads := envInt(t, "BACKPRESSURE_PERF_WORKLOADS", 200)
	perWorkload := envInt(t, "BACKPRESSURE_PERF_QUOTAS_PER_WORKLOAD", 10)
	const namespaces, replicas = 10, 4
	total := workloads * perWorkload
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg, k8s := startAPIServer(t)

	setupStart := time.Now()
	for n := range namespaces {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cold-%d", n)}}); err != nil {
			t.Fatal(err)
		}
	}
	var objects []client.Object
	for w := range workloads {
		ns, name := fmt.Sprintf("cold-%d", w%namespaces), fmt.Sprintf("app-%03d", w)
		objects = append(objects, deployment(ns, name, replicas))
		hpa := &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
				ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
				MinReplicas:    ptr.To[int32](2), MaxReplicas: 20,
			},
		}
		objects = append(objects, hpa)
		for p := range replicas {
			objects = append(objects, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, p), Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			})
		}
		for q := range perWorkload {
			objects = append(objects, quota(ns, fmt.Sprintf("%s-dep-%02d", name, q), name, int32(40+q*10)))
		}
	}
	createAll(ctx, t, k8s, objects)
	t.Logf("set-up: %d quotas over %d workloads in %d namespaces (%d objects) in %s",
		total, workloads, namespaces, len(objects), time.Since(setupStart).Round(time.Millisecond))

	// Measure the manager from here: drop the set-up's garbage, reset the
	// peak resident set, and sample the Go heap.
	runtime.GC()
	resetPeakRSS(t)
	sampler := startHeapSampler()

	reconciledBefore := controllerMetric(t, "controller_runtime_reconcile_total", "controller")
	cpuBefore := readCPU()
	start := time.Now()
	mgr := startManager(ctx, t, cfg)
	waitFor(ctx, t, "every quota Ready", func() (bool, error) {
		return readyQuotas(ctx, mgr.GetCache()) == total, nil
	})
	elapsed := time.Since(start)
	cpu := readCPU().sub(cpuBefore)
	settle(ctx, t, mgr)
	heapPeak := sampler.stop()
	rssPeak := peakRSS(t)
	events := countEvents(ctx, t, k8s)
	t.Logf("cold start: %d quotas Ready in %s (manager start included); %.0f reconciles; API writes %d: %s; events %s",
		total, elapsed.Round(time.Millisecond),
		controllerMetric(t, "controller_runtime_reconcile_total", "controller")-reconciledBefore,
		mgr.writes.Total(), mgr.writes, events)
	t.Logf("cold start memory: peak Go heap %s, peak RSS of the test process (manager and idle test client) %s",
		mib(heapPeak), mib(rssPeak))
	t.Logf("cold start CPU until Ready: manager (test process) %s, API server and etcd %s",
		cpu.self.Round(10*time.Millisecond), cpu.controlPlane.Round(10*time.Millisecond))
	if errs := mgr.logErrors(t); len(errs) > 0 {
		t.Logf("manager logged %d errors; first: %s", len(errs), errs[0])
	}
	mgr.stop()

	// A restart reconciles every quota again and finds nothing to write.
	reconciled := controllerMetric(t, "controller_runtime_reconcile_total", "controller")
	start = time.Now()
	again := startManager(ctx, t, cfg)
	waitFor(ctx, t, "every quota reconciled again", func() (bool, error) {
		return controllerMetric(t, "controller_runtime_reconcile_total", "controller")-reconciled >= float64(total), nil
	})
	settle(ctx, t, again)
	n := controllerMetric(t, "controller_runtime_reconcile_total", "controller") - reconciled
	t.Logf("full resync after a restart: %.0f reconciles in %s, API writes %d %s",
		n, time.Since(start).Round(time.Millisecond), again.writes.Total(), again.writes)
	if again.writes.Total() != 0 {
		t.Errorf("a restart over current state wrote %d times: %s", again.writes.Total(), again.writes)
	}
	if eventsAfter := countEvents(ctx, t, k8s); eventsAfter != events {
		t.Errorf("a restart over current state recorded events: before %s, after %s", events, eventsAfter)
	}
	if errs := again.logErrors(t); len(errs) > 0 {
		t.Errorf("manager logged %d errors on restart; first: %s", len(errs), errs[0])
	}
}

// createAll creates objects with 8 concurrent writers.
func createAll(ctx context.Context, t *testing.T, k8s client.Client, objects []client.Object) {
	t.Helper()
	forEach(t, 8, len(objects), func(i int) error {
		if err := k8s.Create(ctx, objects[i]); err != nil {
			return fmt.Errorf("create %T %s: %w", objects[i], objects[i].GetName(), err)
		}
		return nil
	})
}

// forEach calls do for 0..n-1 from a pool of workers goroutines, and fails
// the test with the first error once they stopped; a worker stops at its
// first error.
func forEach(t *testing.T, workers, n int, do func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// readyQuotas counts the quotas whose Ready is True for their generation,
// as the manager's cache sees them.
func readyQuotas(ctx context.Context, c client.Reader) int {
	return countQuotas(ctx, c, func(ready *metav1.Condition) bool { return ready.Status == metav1.ConditionTrue })
}

// countQuotas counts the quotas that have a Ready condition for their
// generation and for which counted holds of it, as c sees them.
func countQuotas(ctx context.Context, c client.Reader, counted func(ready *metav1.Condition) bool) int {
	var list v1alpha1.DownstreamQuotaList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0
	}
	n := 0
	for i := range list.Items {
		q := &list.Items[i]
		if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
			q.Status.ObservedGeneration == q.Generation && counted(c) {
			n++
		}
	}
	return n
}

// settle waits until the manager's queue is empty and it has issued no
// write for a second.
func settle(ctx context.Context, t *testing.T, m *runningManager) {
	t.Helper()
	last, since := -1, time.Now()
	waitFor(ctx, t, "the manager to settle", func() (bool, error) {
		writes := m.writes.Total()
		depth := controllerMetric(t, "workqueue_depth", "name")
		if writes != last || depth > 0 {
			last, since = writes, time.Now()
		}
		return time.Since(since) > time.Second, nil
	})
}

// countEvents counts the events.k8s.io events by reason.
func countEvents(ctx context.Context, t *testing.T, k8s client.Client) string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	byReason := map[string]int{}
	for _, e := range list.Items {
		byReason[e.Type+"/"+e.Reason]++
	}
	return fmt.Sprint(byReason)
}

// heapSampler records the peak of the Go heap's live and unswept objects.
type heapSampler struct {
	done chan struct{}
	peak chan uint64
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{done: make(chan struct{}), peak: make(chan uint64, 1)}
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-s.done:
				s.peak <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) stop() uint64 {
	close(s.done)
	return <-s.peak
}

// resetPeakRSS resets the kernel's peak resident set of this process.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v); it will include the set-up", err)
	}
}

// peakRSS reads this process's peak resident set (VmHWM).
func peakRSS(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
