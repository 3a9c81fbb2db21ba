package perf

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	bpcontroller "github.com/backpressure-dev/backpressure-operator/internal/controller"
)

// churnP99Goal is the p99 of a Ready pods change to ConfigMap (the
// replicas that count: the divisor is the Ready pods) that the operator
// must keep while pods churn around it.
const churnP99Goal = 100 * time.Millisecond

// TestChurn measures the operator under pod churn: by default 20,000
// realistic pods over 2,000 Deployments (in 20 namespaces) with one quota
// each, and 20 pod events per second for a minute, each flipping one pod's
// Ready condition (a change every quota of the pod's workload must see). It
// reports the operator's CPU per event, its reconciles and writes per
// event, the cache memory per pod, and what the operator does once the
// churn stops, and asserts that a change of another workload's Ready pods
// (readyProbe) reaches its ConfigMap within churnP99Goal at the 99th
// percentile during the churn, and that the operator writes nothing once
// all is settled.
//
// The issue asks for 200 events a second (BACKPRESSURE_PERF_CHURN_RATE=200).
// The reference machine (two cores, shared) cannot take that rate at all:
// a pod's status patch alone, with no operator running, costs the API
// server and etcd 6–11 ms of CPU (the test measures it first), so 200 a
// second would need 1.3–2.1 cores for the events and two to four times
// the machine with the operator's writes (20–40 ms of API server CPU per
// event in all). The default is the rate at which the test passed there with the
// machine quiet; 50 a second filled the machine and missed the goal even
// then. See the Pod churn paragraph of docs/performance.md.
//
// The operator runs in the test's process, and so does the client that
// sends the events: its CPU per event is measured first, alone (before the
// operator starts), and taken off the process's.
func TestChurn(t *testing.T) {
	requirePerf(t)
	pods := envInt(t, "BACKPRESSURE_PERF_CHURN_PODS", 20000)
	workloads := envInt(t, "BACKPRESSURE_PERF_CHURN_WORKLOADS", 2000)
	rate := envInt(t, "BACKPRESSURE_PERF_CHURN_RATE", 20)
	duration := time.Duration(envInt(t, "BACKPRESSURE_PERF_CHURN_SECONDS", 60)) * time.Second
	const namespaces = 20
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cfg, k8s := startAPIServer(t)

	setupStart := time.Now()
	var objects []client.Object
	for n := range min(namespaces, workloads) {
		objects = append(objects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d", n)}})
	}
	createAll(ctx, t, k8s, objects)
	objects = objects[:0]
	workloadOf := func(i int) (ns, name string) {
		w := i % workloads
		return fmt.Sprintf("churn-%d", w%namespaces), fmt.Sprintf("app-%04d", w)
	}
	perWorkload := int32(max(1, pods/workloads))
	policy := sharesPolicy(t)
	for w := range workloads {
		ns, name := workloadOf(w)
		q := quota(ns, name+"-api", name, 4*perWorkload)
		q.Spec.Shares = &v1alpha1.Shares{Policy: policy}
		objects = append(objects, deployment(ns, name, perWorkload), q)
	}
	// With demand-following, every pod's demand is 80 % of its equal
	// share (4 × 80 % usable), read with noise: steady load.
	var opts []bpcontroller.Option
	var demand *noisyDemand
	if policy == v1alpha1.SharesDemand {
		names := map[string][]string{}
		for i := range pods {
			_, name := workloadOf(i)
			names[name] = append(names[name], podName(name, i))
		}
		demand = newNoisyDemand(names, 0.8*4*0.8)
		opts = append(opts, bpcontroller.WithDemandSource(demand))
	}
	createAll(ctx, t, k8s, objects)
	// Pod i belongs to workload i mod workloads, so that successive events
	// reach successive workloads.
	createPods(ctx, t, k8s, pods, func(i int) *corev1.Pod {
		ns, name := workloadOf(i)
		return realisticPod(ns, name, i)
	})
	t.Logf("set-up: %d pods over %d Deployments with %d quotas in %d namespaces in %s",
		pods, workloads, workloads, min(namespaces, workloads), time.Since(setupStart).Round(time.Millisecond))

	perPod := cacheHeapPerPod(ctx, t, cfg, bpcontroller.CacheOptions(), &corev1.Pod{}, pods)
	t.Logf("pod cache memory: %.0f B of Go heap in use per pod (%d pods, as the controller caches them)", perPod, pods)

	gen := &podChurn{k8s: k8s, pods: pods, name: func(i int) types.NamespacedName {
		ns, name := workloadOf(i)
		return types.NamespacedName{Namespace: ns, Name: podName(name, i)}
	}}
	gen.ready = make([]atomic.Bool, pods)
	for i := range gen.ready {
		gen.ready[i].Store(true)
	}
	// The sender's own CPU, without the operator.
	baseline := min(duration, 10*time.Second)
	cpuBefore := readCPU()
	baselineStart := time.Now()
	sent := gen.run(ctx, t, rate, baseline)
	baselineTook := time.Since(baselineStart)
	alone := readCPU().sub(cpuBefore)
	senderPerEvent := alone.self / time.Duration(max(sent, 1))
	// What the events cost the API server and etcd without the operator
	// bounds the rate the machine can take at all.
	t.Logf("the event sender alone: %d events in %s (%.0f per second), %s of CPU per event; API server and etcd %s per event (%.2f cores)",
		sent, baselineTook.Round(time.Millisecond), float64(sent)/baselineTook.Seconds(), senderPerEvent.Round(time.Microsecond),
		(alone.controlPlane / time.Duration(max(sent, 1))).Round(time.Microsecond), alone.controlPlane.Seconds()/baselineTook.Seconds())

	mgr := startManager(ctx, t, cfg, opts...)
	probe := newReadyProbe(ctx, t, cfg, k8s, "churn-probe")
	total := workloads + 1
	start := time.Now()
	// The sender left some workloads without Ready pods: a quota counts
	// once it wrote a Ready condition for its generation, True or not.
	waitFor(ctx, t, "every quota reconciled", func() (bool, error) {
		return countQuotas(ctx, mgr.GetCache(), func(*metav1.Condition) bool { return true }) == total, nil
	})
	settle(ctx, t, mgr)
	t.Logf("cold start over the churn set-up: every quota reconciled and the operator settled %s after its caches synced", time.Since(start).Round(time.Millisecond))

	reconciledBefore := controllerMetric(t, "controller_runtime_reconcile_total", "controller")
	reconcileSecondsBefore := controllerMetric(t, "controller_runtime_reconcile_time_seconds", "controller")
	writesBefore := mgr.writes.Total()
	kindsBefore := mgr.writes.Counts()
	resultsBefore := reconcileResults(t)
	stopProfile := startCPUProfile(t, os.Getenv("BACKPRESSURE_PERF_CHURN_CPUPROFILE"))
	cpuBefore = readCPU()
	probeDone := make(chan []time.Duration, 1)
	churnCtx, endChurn := context.WithCancel(ctx)
	go func() {
		var latencies []time.Duration
		defer func() { probeDone <- latencies }()
		for churnCtx.Err() == nil {
			changeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			d, err := probe.change(changeCtx)
			cancel()
			if err != nil {
				t.Errorf("probe: %v", err)
				return
			}
			latencies = append(latencies, d)
			select {
			case <-churnCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	planEventsBefore := planChangedEvents(ctx, t, k8s)
	revisionsBefore := divisionRevisions(ctx, t, k8s)
	t.Logf("churn: %s shares; sending %d pod events a second for %s", policy, rate, duration)
	churnStart := time.Now()
	events := gen.run(ctx, t, rate, duration)
	churnTook := time.Since(churnStart)
	endChurn()
	latencies := <-probeDone
	cpu := readCPU().sub(cpuBefore)
	stopProfile()
	reconciles := controllerMetric(t, "controller_runtime_reconcile_total", "controller") - reconciledBefore
	writes := mgr.writes.Total() - writesBefore
	reconcileSeconds := controllerMetric(t, "controller_runtime_reconcile_time_seconds", "controller") - reconcileSecondsBefore
	depth := controllerMetric(t, "workqueue_depth", "name")

	operatorCPU := cpu.self - senderPerEvent*time.Duration(events)
	slices.Sort(latencies)
	t.Logf("churn: %d pod events in %s (%.0f per second; goal %d)", events, churnTook.Round(time.Millisecond), float64(events)/churnTook.Seconds(), rate)
	t.Logf("churn CPU: operator %s per event (test process %s less the sender's %s per event); API server and etcd %s per event",
		(operatorCPU / time.Duration(max(events, 1))).Round(time.Microsecond), cpu.self.Round(10*time.Millisecond),
		senderPerEvent.Round(time.Microsecond), (cpu.controlPlane / time.Duration(max(events, 1))).Round(time.Microsecond))
	t.Logf("churn reconciles: %.0f, %.2f per event (the probe's %d changes included), %s each on average; API writes %d, %.2f per event; queue depth %.0f at the end",
		reconciles, reconciles/float64(max(events, 1)), len(latencies), (time.Duration(reconcileSeconds / max(reconciles, 1) * 1e9)).Round(time.Millisecond),
		writes, float64(writes)/float64(max(events, 1)), depth)
	t.Logf("churn writes by kind: %s; reconciles by result: %s", countsSince(kindsBefore, mgr.writes.Counts()), countsSince(resultsBefore, reconcileResults(t)))
	t.Logf("churn Ready pods → ConfigMap over %d changes: %s", len(latencies), summary(latencies))
	patches := slices.Sorted(slices.Values(probe.patches))
	t.Logf("churn: the probe's own pod status patches, part of those figures, took %s", summary(patches))
	// Recorded asynchronously: a few may still be on their way.
	planEvents := planChangedEvents(ctx, t, k8s) - planEventsBefore
	revisions := divisionRevisions(ctx, t, k8s) - revisionsBefore
	t.Logf("churn: %d new revisions of the quotas' divisions, %.2f per quota per minute", revisions,
		float64(revisions)/float64(total)/churnTook.Minutes())
	if demand != nil {
		t.Logf("churn: demand read %d times", demand.count())
	}

	// The queue drains; then the handovers of the pods that stopped being
	// Ready finish, as nobody acknowledges here, once their unacknowledged
	// delay has passed; then the operator falls silent.
	churnEnd := time.Now()
	reconciledBefore, writesBefore, kindsBefore = controllerMetric(t, "controller_runtime_reconcile_total", "controller"), mgr.writes.Total(), mgr.writes.Counts()
	for controllerMetric(t, "workqueue_depth", "name") > 0 && time.Since(churnEnd) < 15*time.Minute {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after the churn: the work queue drained in %s (%.0f reconciles, %d writes)", time.Since(churnEnd).Round(100*time.Millisecond),
		controllerMetric(t, "controller_runtime_reconcile_total", "controller")-reconciledBefore, mgr.writes.Total()-writesBefore)
	// The last shares told smaller were recorded by the time the queue
	// drained; their delay ends at the latest that long after.
	time.Sleep(bpcontroller.DefaultUnacknowledgedDelay)
	settle(ctx, t, mgr)
	tail := controllerMetric(t, "controller_runtime_reconcile_total", "controller") - reconciledBefore
	t.Logf("after the churn: handovers done and the operator settled %s after the churn; %.0f reconciles (%.2f per quota), writes %s",
		time.Since(churnEnd).Round(100*time.Millisecond), tail, tail/float64(total), countsSince(kindsBefore, mgr.writes.Counts()))

	idle := time.Duration(envInt(t, "BACKPRESSURE_PERF_CHURN_IDLE_SECONDS", 60)) * time.Second
	reconciledBefore, writesBefore, kindsBefore = controllerMetric(t, "controller_runtime_reconcile_total", "controller"), mgr.writes.Total(), mgr.writes.Counts()
	readsBefore := 0
	if demand != nil {
		readsBefore = demand.count()
	}
	quietBefore := revisionsByQuota(ctx, t, k8s)
	time.Sleep(idle)
	idleReconciles := controllerMetric(t, "controller_runtime_reconcile_total", "controller") - reconciledBefore
	t.Logf("quiet, no events for %s: %.0f reconciles (%.2f per quota per minute), writes %s",
		idle, idleReconciles, idleReconciles/float64(total)/idle.Minutes(), countsSince(kindsBefore, mgr.writes.Counts()))
	n := mgr.writes.Total() - writesBefore
	if demand == nil {
		// Equal shares of pods that do not change: nothing to write.
		if n > 0 {
			t.Errorf("the operator wrote %d times with nothing changing: %s", n, countsSince(kindsBefore, mgr.writes.Counts()))
		}
	} else {
		// Steady demand read with noise: the band keeps most divisions
		// still, and none may move more than once a minute.
		moved, most := mostRevisions(quietBefore, revisionsByQuota(ctx, t, k8s))
		t.Logf("quiet: demand read %d times; %d of %d quotas divided anew, at most %d times one, %d writes",
			demand.count()-readsBefore, moved, total, most, n)
		if float64(most) > idle.Minutes() {
			t.Errorf("a quota's division moved %d times in a quiet %s under steady demand, more than once a minute", most, idle)
		}
		// The demand watch wakes only the quotas whose reading moves their
		// division: each is reconciled once for the move and at most once
		// more for its handover; a quota whose division holds is not
		// reconciled at all (before the watch, every quota was, at every
		// interval: 4 a minute).
		if idleReconciles > float64(2*moved) {
			t.Errorf("%.0f reconciles in a quiet %s under steady demand for %d quotas divided anew; want at most 2 each, none for the others", idleReconciles, idle, moved)
		}
	}
	t.Logf("events recorded: %s", countEvents(ctx, t, k8s))
	if perEvent, n := eventCost(ctx, t, k8s, min(max(planEvents, 100), 1000), rate); n > 0 {
		t.Logf("PlanChanged events: %d during the churn, %.2f per pod event; one costs the API server and etcd %s of CPU (%d created alike at %d a second), %.1f%% of their CPU per pod event during the churn",
			planEvents, float64(planEvents)/float64(max(events, 1)), perEvent.Round(time.Microsecond), n, rate,
			100*float64(perEvent)*float64(planEvents)/float64(max(cpu.controlPlane, 1)))
	}
	if len(latencies) == 0 {
		t.Fatal("the probe measured nothing during the churn")
	}
	if p99 := percentile(latencies, 99); p99 >= churnP99Goal {
		t.Errorf("Ready pods → ConfigMap p99 during the churn is %s, goal < %s", p99.Round(10*time.Microsecond), churnP99Goal)
	}
	if errs := mgr.logErrors(t); len(errs) > 0 {
		t.Logf("manager logged %d errors; first: %s", len(errs), errs[0])
	}
}

// podChurn flips the Ready condition of pods, one pod per event, in turn.
type podChurn struct {
	k8s   client.Client
	pods  int
	name  func(i int) types.NamespacedName
	ready []atomic.Bool
	next  int
}

// run sends events at rate per second for d, from 32 concurrent senders so
// that a slow response does not hold back the rate, and returns how many it
// sent. When every sender is busy the pace falls behind, which the caller
// sees in the count.
func (c *podChurn) run(ctx context.Context, t *testing.T, rate int, d time.Duration) int {
	t.Helper()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range 32 {
		wg.Go(func() {
			for i := range jobs {
				if err := c.flip(ctx, i); err != nil {
					if failed.Add(1) == 1 {
						firstErr.Store(err)
					}
				}
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	sent := 0
	for next := start; time.Since(start) < d; next = next.Add(interval) {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case jobs <- c.next % c.pods:
			c.next++
			sent++
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d pod events failed; first: %v", n, sent, firstErr.Load())
	}
	return sent
}

// flip patches pod i's Ready condition to the opposite of what it was.
func (c *podChurn) flip(ctx context.Context, i int) error {
	ready := !c.ready[i].Load()
	c.ready[i].Store(ready)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	key := c.name(i)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.k8s.Status().Patch(ctx, pod, readyPatch(status)); err != nil {
		return fmt.Errorf("pod %s: %w", key, err)
	}
	return nil
}

// reconcileResults returns the controller's reconciles so far by result
// (success, error, requeue, requeue_after).
func reconcileResults(t *testing.T) map[string]int {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["controller"] == bpcontroller.ControllerName {
				out[labels["result"]] += int(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

// countsSince formats the counts of after less those of before, in key
// order, leaving out those that did not grow.
func countsSince(before, after map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if n := after[k] - before[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// startCPUProfile writes a CPU profile of the test process (the operator
// and the event sender) to path until the returned function is called; an
// empty path profiles nothing.
func startCPUProfile(t *testing.T, path string) func() {
	t.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Errorf("cpu profile %s: %v", path, err)
		}
	}
}

// planChangedEvents counts the PlanChanged events the operator recorded.
func planChangedEvents(ctx context.Context, t *testing.T, k8s client.Client) int {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == "PlanChanged" {
			n++
		}
	}
	return n
}

// eventCost creates n events like the last PlanChanged event the operator
// recorded, one at a time at rate a second, as its recorder sends them, and
// returns the CPU the API server and etcd spent per event, and n; 0 and 0
// when the operator recorded none.
func eventCost(ctx context.Context, t *testing.T, k8s client.Client, n, rate int) (time.Duration, int) {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var model *eventsv1.Event
	for i := range list.Items {
		if e := &list.Items[i]; e.Reason == "PlanChanged" && (model == nil || e.EventTime.After(model.EventTime.Time)) {
			model = e
		}
	}
	if model == nil {
		return 0, 0
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	before := readCPU()
	for i := range n {
		<-tick.C
		e := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{Namespace: model.Namespace, Name: fmt.Sprintf("%s.cost-%d", model.Regarding.Name, i)},
			EventTime:           metav1.NowMicro(),
			ReportingController: model.ReportingController,
			ReportingInstance:   model.ReportingInstance,
			Action:              model.Action,
			Reason:              model.Reason,
			Regarding:           model.Regarding,
			Note:                model.Note,
			Type:                model.Type,
		}
		if err := k8s.Create(ctx, e); err != nil {
			t.Fatalf("create an event like PlanChanged: %v", err)
		}
	}
	return readCPU().sub(before).controlPlane / time.Duration(n), n
}

// divisionRevisions sums the revisions of every quota's division: how many
// times the operator divided anew.
func divisionRevisions(ctx context.Context, t *testing.T, k8s client.Client) int64 {
	t.Helper()
	var n int64
	for _, r := range revisionsByQuota(ctx, t, k8s) {
		n += r
	}
	return n
}

// revisionsByQuota returns each quota's division revision by its
// namespace/name.
func revisionsByQuota(ctx context.Context, t *testing.T, k8s client.Client) map[string]int64 {
	t.Helper()
	var list v1alpha1.DownstreamQuotaList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64, len(list.Items))
	for _, q := range list.Items {
		if d := q.Status.Division; d != nil {
			out[q.Namespace+"/"+q.Name] = d.Revision
		}
	}
	return out
}

// mostRevisions returns how many quotas have a newer revision in after than
// in before, and the most revisions one quota gained.
func mostRevisions(before, after map[string]int64) (moved int, most int64) {
	for k, r := range after {
		if n := r - before[k]; n > 0 {
			moved++
			most = max(most, n)
		}
	}
	return moved, most
}
