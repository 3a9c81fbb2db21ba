package perf

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// TestReadyPodsToConfigMapLatency measures the time from a change of the
// number of a workload's Ready pods (the divisor: a pod's Ready condition
// flips, as the kubelet writes it) to a watcher of the workload's ConfigMap
// seeing the new plan. The clock starts before the status patch is sent, so
// each figure includes the patch's own round trip.
func TestReadyPodsToConfigMapLatency(t *testing.T) {
	requirePerf(t)
	changes := envInt(t, "BACKPRESSURE_PERF_CHANGES", 200)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, k8s := startAPIServer(t)
	startManager(ctx, t, cfg)
	probe := newReadyProbe(ctx, t, cfg, k8s, "latency")
	latencies := make([]time.Duration, 0, changes)
	for i := range changes {
		d, err := probe.change(ctx)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		latencies = append(latencies, d)
	}
	slices.Sort(latencies)
	t.Logf("Ready pods → ConfigMap over %d changes: %s", changes, summary(latencies))
}

// summary formats the median, p90, p99, maximum and minimum of sorted
// durations.
func summary(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "no samples"
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("median %s, p90 %s, p99 %s, max %s (min %s)",
		r(percentile(sorted, 50)), r(percentile(sorted, 90)), r(percentile(sorted, 99)), r(sorted[len(sorted)-1]), r(sorted[0]))
}

// readyProbe is a Deployment with three Ready pods and a quota of 1000
// permits at 100% safety, in a namespace of their own. It flips the third
// pod's Ready condition to time how fast the new division reaches the
// ConfigMap: a pod that stops being Ready is told 0 permits at once, and
// one that is Ready again gets back the share it may still hold (nobody
// acknowledges here, so the other two keep theirs).
type readyProbe struct {
	k8s       client.Client
	pod       *corev1.Pod
	ready     bool
	published <-chan publishedPlan
	// patches are the round trips of the probe's own pod status patches,
	// the part of each figure the operator has no say in.
	patches []time.Duration
}

// publishedPlan is the share of the probe's flipping pod that a watcher of
// the ConfigMap saw, and when.
type publishedPlan struct {
	permits int
	at      time.Time
}

// newReadyProbe creates the probe's namespace, workload, pods and quota,
// waits for the first plan, and starts watching the ConfigMap until ctx
// ends.
func newReadyProbe(ctx context.Context, t *testing.T, cfg *rest.Config, k8s client.Client, ns string) *readyProbe {
	t.Helper()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, deployment(ns, "api", 3)); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	createPods(ctx, t, k8s, 3, func(i int) *corev1.Pod {
		p := realisticPod(ns, "api", i)
		pods = append(pods, p)
		return p
	})
	flipping := podName("api", 2)
	q := quota(ns, "payments", "api", 1000)
	q.Spec.SafetyPercent = 100
	if err := k8s.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the first plan", func() (bool, error) {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(q), q); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && q.Status.Replicas != nil && q.Status.Replicas.Divisor == 3, nil
	})

	cs := kubernetes.NewForConfigOrDie(cfg)
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "api-backpressure").String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	published := make(chan publishedPlan, 16)
	go func() {
		defer close(published)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			if doc, err := plan.Parse([]byte(cm.Data["payments.json"])); err == nil {
				published <- publishedPlan{doc.For(flipping).Permits, time.Now()}
			}
		}
	}()
	return &readyProbe{k8s: k8s, pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: flipping}}, ready: true, published: published}
}

// change flips the probe pod's Ready condition and returns the time until
// the watcher saw its share follow: none when it is not Ready, some when it
// is.
func (p *readyProbe) change(ctx context.Context) (time.Duration, error) {
	p.ready = !p.ready
	status := corev1.ConditionFalse
	if p.ready {
		status = corev1.ConditionTrue
	}
	start := time.Now()
	if err := p.k8s.Status().Patch(ctx, p.pod.DeepCopy(), readyPatch(status)); err != nil {
		return 0, fmt.Errorf("pod status: %w", err)
	}
	p.patches = append(p.patches, time.Since(start))
	for {
		select {
		case got, ok := <-p.published:
			if !ok {
				return 0, fmt.Errorf("the ConfigMap watch ended")
			}
			if (got.permits > 0) == p.ready {
				return got.at.Sub(start), nil
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// readyPatch is a strategic merge patch of a pod's status that sets its
// Ready condition's status.
func readyPatch(status corev1.ConditionStatus) client.Patch {
	return client.RawPatch(types.StrategicMergePatchType, fmt.Appendf(nil, `{"status":{"conditions":[{"type":"Ready","status":%q}]}}`, status))
}

// waitFor polls done every 20ms until it reports true, failing the test on
// an error or when ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	for {
		ok, err := done()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// deployment returns a Deployment of replicas whose pods carry app=<name>.
func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	return builders.MakeDeployment(ns, name).Replicas(replicas).Obj()
}

// quota returns a quota of concurrency over the Deployment workload, for a
// fast downstream: 50 ms typical latency, a 1 s deadline.
func quota(ns, name, workload string, concurrency int32) *v1alpha1.DownstreamQuota {
	return builders.MakeQuota(ns, name).Workload("Deployment", workload).Downstream(name + ".example.com").
		Concurrency(concurrency).Latency(50 * time.Millisecond).Deadline(time.Second).Obj()
}
