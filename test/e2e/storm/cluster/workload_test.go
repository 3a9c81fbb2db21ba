//go:build unix

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// A pod's process in this test: it serves at once, and on SIGTERM takes
// 300ms to finish its in-flight work before it exits.
const podScript = `echo "{\"time\":\"2026-05-01T10:00:00Z\",\"level\":\"INFO\",\"msg\":\"Serving\",\"address\":\"127.0.0.1:$PORT\"}" >&2
trap 'sleep 0.3; echo "{\"time\":\"2026-05-01T10:00:01Z\",\"level\":\"INFO\",\"msg\":\"Stopped\"}" >&2; exit 0' TERM
while :; do sleep 0.05; done
`

// TestWorkloadAgainstAPIServer checks the harness's scheduler and kubelet,
// and its custom metrics API, against a real API server and
// kube-controller-manager: the real HPA controller reads the replicas the
// test asks for through the aggregation layer and scales the Deployment,
// the real Deployment and ReplicaSet controllers create and delete the
// pods, the harness binds and runs them, and the garbage collector removes
// them with their Deployment.
func TestWorkloadAgainstAPIServer(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx := context.Background()
	cl, err := cluster.Start(ctx, cluster.Options{OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c, cfg, metrics := cl.Client, cl.Config, cl.Metrics
	dir := t.TempDir()
	if err := storm.WriteManifests(dir); err != nil {
		t.Fatal(err)
	}
	// Three replicas from the start: the real ReplicaSet controller acts on
	// the Deployment as soon as it exists.
	depPath := filepath.Join(dir, "deployment.yaml")
	depYAML, err := os.ReadFile(depPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(depPath, []byte(strings.Replace(string(depYAML), "replicas: 8", "replicas: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	const ns = "workload-test"
	for _, args := range [][]string{
		{"create", "namespace", ns},
		{"apply", "-n", ns, "-f", filepath.Join(dir, "deployment.yaml"), "-f", filepath.Join(dir, storm.DictatedHPAManifest)},
	} {
		if err := cl.Kubectl(args...); err != nil {
			t.Fatal(err)
		}
	}

	script := filepath.Join(t.TempDir(), "pod.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"+podScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	stopped := map[string]int{}
	port := 1000
	run := func(pod *corev1.Pod, onLog func(cluster.LogLine)) (*cluster.Process, error) {
		mu.Lock()
		port++
		env := []string{fmt.Sprintf("PORT=%d", port), "POD_NAME=" + pod.Name}
		mu.Unlock()
		return cl.StartProcess(cluster.ProcessSpec{Name: pod.Name, Path: script, Env: env, OnLog: func(l cluster.LogLine) {
			if l.Msg == cluster.MsgStopped {
				mu.Lock()
				stopped[pod.Name]++
				mu.Unlock()
			}
			onLog(l)
		}})
	}
	endpoints := &traffic.Endpoints{}
	w, err := cluster.NewWorkload(ctx, cluster.WorkloadOptions{
		Client: c, Config: cfg, Metrics: metrics, Namespace: ns, Name: storm.WorkloadName, HPA: storm.WorkloadName,
		Run: run, Endpoints: endpoints, StartDelay: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })

	pods := func() []corev1.Pod {
		t.Helper()
		var l corev1.PodList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 20s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Start: three pods, created by the ReplicaSet controller, bound,
	// Running and Ready, in the endpoints.
	if err := w.Start(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	var rs appsv1.ReplicaSet
	for _, p := range pods() {
		ready := false
		for _, cond := range p.Status.Conditions {
			ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
		}
		if p.Status.Phase != corev1.PodRunning || !ready || p.Spec.NodeName == "" {
			t.Errorf("pod %s: phase %s, ready %v, node %q", p.Name, p.Status.Phase, ready, p.Spec.NodeName)
		}
		owner := p.OwnerReferences[0]
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: owner.Name}, &rs); err != nil || owner.Kind != "ReplicaSet" {
			t.Fatalf("pod %s: owner %+v: %v", p.Name, owner, err)
		}
	}
	if rs.OwnerReferences[0].Kind != "Deployment" || rs.OwnerReferences[0].Name != storm.WorkloadName || *rs.Spec.Replicas != 3 {
		t.Errorf("ReplicaSet %s: owners %+v, replicas %d", rs.Name, rs.OwnerReferences, *rs.Spec.Replicas)
	}
	if endpoints.Len() != 3 {
		t.Errorf("%d endpoints, want 3", endpoints.Len())
	}
	eventually("the deployment controller's status shows 3 ready", func() bool {
		var d appsv1.Deployment
		_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: storm.WorkloadName}, &d)
		return d.Status.ReadyReplicas == 3 && d.Status.Replicas == 3
	})

	// Scale down: the test asks the HPA for one replica; the HPA controller
	// reads it through the aggregation layer and scales the Deployment; the
	// ReplicaSet controller deletes two pods, which leave the endpoints,
	// stay as objects with a deletionTimestamp while their processes
	// finish, and then go.
	if err := w.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	eventually("the HPA scales the deployment to 1", func() bool {
		var dep appsv1.Deployment
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: storm.WorkloadName}, &dep) == nil && *dep.Spec.Replicas == 1
	})
	// The HPA controller updates the scale subresource before it writes its
	// own status, so the Deployment can show 1 while the HPA's status is
	// still an earlier sync's: one from before Start set the metric failed
	// with "no storm_scenario_replicas", and with a sync every 2s the next
	// may be the one that scaled.
	eventually("the HPA's status shows desired 1 and the object metric", func() bool {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: storm.WorkloadName}, &hpa) == nil &&
			hpa.Status.DesiredReplicas == 1 && len(hpa.Status.CurrentMetrics) == 1 && hpa.Status.CurrentMetrics[0].Object != nil
	})
	// The workload's informer records the change; it may see it after the
	// Get above did.
	eventually("Scales() records the last scale as 3 → 1", func() bool {
		sc := w.Scales(time.Time{})
		return len(sc) > 0 && sc[len(sc)-1].From == 3 && sc[len(sc)-1].To == 1
	})
	eventually("endpoints down to 1", func() bool { return endpoints.Len() == 1 })
	terminating := 0
	for _, p := range pods() {
		if p.DeletionTimestamp != nil {
			terminating++
		}
	}
	if terminating != 2 {
		// The processes take 300ms after SIGTERM, the preStop pause is 0:
		// the objects are still there when the endpoints drop.
		t.Errorf("%d pods with a deletionTimestamp while their processes stop, want 2", terminating)
	}
	eventually("the departing pods are gone", func() bool { return len(pods()) == 1 })
	mu.Lock()
	if len(stopped) != 2 {
		t.Errorf("%d processes stopped gracefully before their pods went, want 2", len(stopped))
	}
	mu.Unlock()
	// The kubelet forgets a pod just after its final delete.
	eventually("the kubelet counts one pod", func() bool { c := w.Counts(); return c.Existing == 1 && c.Terminating == 0 })
	if c := w.Counts(); c.Existing != 1 || c.Ready != 1 || c.Terminating != 0 || c.Desired != 1 {
		t.Errorf("Counts() = %+v", c)
	}

	// A pod deleted before it was scheduled goes at once.
	if err := w.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	eventually("the unscheduled pod is gone", func() bool { return len(pods()) == 1 && w.Counts().Existing == 1 })
	if err := w.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}

	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(pods()); n != 0 {
		t.Errorf("%d pods after Close", n)
	}
	eventually("the garbage collector deletes the ReplicaSet", func() bool {
		var l appsv1.ReplicaSetList
		return c.List(ctx, &l, client.InNamespace(ns)) == nil && len(l.Items) == 0
	})
	names := w.Running()
	if len(names) != 0 {
		t.Errorf("Running() after Close = %s", strings.Join(names, ","))
	}

	testStatefulSetWorkload(t, statefulSetTest{c: c, cfg: cfg, cl: cl, metrics: metrics, dir: dir, ns: ns, run: run, pods: pods, eventually: eventually,
		stops: func(name string) int {
			mu.Lock()
			defer mu.Unlock()
			return stopped[name]
		}})
}

// statefulSetTest is what TestWorkloadAgainstAPIServer hands its
// StatefulSet part.
type statefulSetTest struct {
	c          client.Client
	cfg        *rest.Config
	cl         *cluster.Cluster
	metrics    *cluster.MetricsAPI
	dir, ns    string
	run        cluster.PodRunner
	pods       func() []corev1.Pod
	eventually func(what string, cond func() bool)
	// stops counts the processes of a pod name that stopped gracefully.
	stops func(name string) int
}

// testStatefulSetWorkload checks the harness's kubelet with a StatefulSet:
// the real StatefulSet controller creates search-gateway-0 and -1; a pod
// deleted comes back under its name as a new Pod with a new process, once
// the old one stopped; a new Pod under a name whose old Pod's deletion the
// kubelet never saw (a relist) stops the old process too; the real HPA
// scales the StatefulSet down through its scale subresource.
func testStatefulSetWorkload(t *testing.T, st statefulSetTest) {
	t.Helper()
	ctx := context.Background()
	stsPath := filepath.Join(st.dir, storm.StatefulSetManifest)
	b, err := os.ReadFile(stsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stsPath, []byte(strings.Replace(string(b), "replicas: 4", "replicas: 2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.cl.Kubectl("apply", "-n", st.ns, "-f", stsPath, "-f", filepath.Join(st.dir, storm.StatefulSetHPAManifest)); err != nil {
		t.Fatal(err)
	}
	w, err := cluster.NewWorkload(ctx, cluster.WorkloadOptions{
		Client: st.c, Config: st.cfg, Metrics: st.metrics, Namespace: st.ns, Kind: cluster.KindStatefulSet, Name: storm.WorkloadName, HPA: storm.WorkloadName,
		Run: st.run, Endpoints: &traffic.Endpoints{}, StartDelay: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(ctx) })
	if err := w.Start(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := w.WaitReady(ctx, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	uids := map[string]types.UID{}
	for _, p := range st.pods() {
		if owner := metav1.GetControllerOf(&p); owner == nil || owner.Kind != cluster.KindStatefulSet {
			t.Errorf("pod %s: controller %+v", p.Name, owner)
		}
		uids[p.Name] = p.UID
	}
	if got := w.Ready(); !slices.Equal(got, []string{"search-gateway-0", "search-gateway-1"}) {
		t.Fatalf("Ready() = %v, want %v", got, []string{"search-gateway-0", "search-gateway-1"})
	}
	// readyAgain waits until name is Ready as a Pod other than old.
	readyAgain := func(name string, old types.UID) {
		t.Helper()
		st.eventually(name+" Ready again as a new Pod", func() bool {
			var p corev1.Pod
			return st.c.Get(ctx, client.ObjectKey{Namespace: st.ns, Name: name}, &p) == nil && p.UID != old &&
				slices.Contains(w.Ready(), name) && len(w.Running()) == 2
		})
	}

	// Deleted, it comes back under its name: a new Pod, a new process, the
	// old one stopped gracefully first.
	name := "search-gateway-1"
	if err := st.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	readyAgain(name, uids[name])
	var lives []cluster.PodLife
	for _, l := range w.Lives() {
		if l.Name == name {
			lives = append(lives, l)
		}
	}
	if len(lives) != 2 || lives[0].UID != uids[name] || lives[0].Exited.IsZero() || !lives[1].Started.After(lives[0].Exited) {
		t.Errorf("the lives of %s: %+v; want the old one exited before the new one started", name, lives)
	}
	if n := st.stops(name); n != 1 {
		t.Errorf("%d processes of %s stopped gracefully, want 1", n, name)
	}

	// A relist shows the name's new Pod without the old one's deletion:
	// the kubelet stops the old process (its final delete removes the real
	// Pod, which the StatefulSet controller creates again).
	name = "search-gateway-0"
	w.ObservePod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: st.ns, Name: name, UID: "unseen", Labels: map[string]string{"app.kubernetes.io/name": storm.WorkloadName}}}, false)
	st.eventually(name+"'s old process stopped", func() bool { return st.stops(name) == 1 })
	readyAgain(name, uids[name])

	// The real HPA scales the StatefulSet down on its ReplicasMetric; the
	// controller deletes the highest ordinal.
	if err := w.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	st.eventually("the HPA scales the statefulset to 1, and search-gateway-1 goes", func() bool {
		return slices.Equal(w.Running(), []string{"search-gateway-0"}) && len(st.pods()) == 1
	})
	st.eventually("Scales() records the last scale as → 1", func() bool {
		sc := w.Scales(time.Time{})
		return len(sc) > 0 && sc[len(sc)-1].To == 1
	})
	if err := w.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(st.pods()); n != 0 {
		t.Errorf("%d pods after the StatefulSet's Close", n)
	}
}
