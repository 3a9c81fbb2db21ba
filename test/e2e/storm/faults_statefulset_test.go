//go:build unix

package storm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

func TestStatefulSetTimeline(t *testing.T) {
	if stsUpTimeout <= 0 || stsRecreateTimeout <= 0 || stsDownTimeout <= 0 {
		t.Errorf("step timeouts %v, %v, %v: each step must have time before the next event", stsUpTimeout, stsRecreateTimeout, stsDownTimeout)
	}
	if got := ordinals(3); !cmp.Equal(got, []string{"search-gateway-0", "search-gateway-1", "search-gateway-2"}) {
		t.Errorf("ordinals(3) = %v", got)
	}
	for name, want := range map[string]int{"search-gateway-12": 12, "search-gateway-x": -1, "other-1": -1} {
		if got := ordinal(name); got != want {
			t.Errorf("ordinal(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestStatefulSetOrder(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	life := func(o int, seen, ready, stopping, exited float64) cluster.PodLife {
		l := cluster.PodLife{Name: ordinals(o + 1)[o], UID: types.UID(ordinals(o + 1)[o] + "-uid"), Seen: at(seen), Started: at(seen + 0.1)}
		if ready > 0 {
			l.Ready = at(ready)
		}
		if stopping > 0 {
			l.Stopping, l.Exited = at(stopping), at(exited)
		}
		return l
	}
	// 2 pods from the start; 2 → 4 from 1 s, one at a time; 4 → 1 from
	// 10 s, from the highest ordinal, one at a time.
	ordered := []cluster.PodLife{
		life(0, -5, -4, 0, 0), life(1, -4, -3, 11.5, 12),
		life(2, 2, 3, 11, 11.4), life(3, 3.1, 4, 10.2, 10.8),
	}
	if bad := creationOrder(ordered, at(1), 2, 4); len(bad) != 0 {
		t.Errorf("creationOrder of an ordered scale-up = %v", bad)
	}
	if bad := deletionOrder(ordered, at(10), 1, 4); len(bad) != 0 {
		t.Errorf("deletionOrder of an ordered scale-down = %v", bad)
	}

	// Parallel: pod 3 created before pod 2 was Ready, pod 2 deleted while
	// pod 3 still ran, pod 0 deleted too.
	parallel := []cluster.PodLife{
		life(0, -5, -4, 10.1, 10.5), life(1, -4, -3, 10.1, 10.5),
		life(2, 2, 3, 10.1, 10.5), life(3, 2.1, 3, 10.1, 10.6),
	}
	want := []string{"search-gateway-3 created 0.90s before search-gateway-2 was Ready"}
	if diff := cmp.Diff(want, creationOrder(parallel, at(1), 2, 4)); diff != "" {
		t.Errorf("creationOrder (-want +got):\n%s", diff)
	}
	want = []string{
		"search-gateway-0 deleted, not one of the scale-down's",
		"search-gateway-2 deleted 0.50s before search-gateway-3 had exited",
		"search-gateway-1 deleted 0.40s before search-gateway-2 had exited",
	}
	if diff := cmp.Diff(want, deletionOrder(parallel, at(10), 1, 4)); diff != "" {
		t.Errorf("deletionOrder (-want +got):\n%s", diff)
	}
	// A pod of the scale-up never created, one of the scale-down never
	// deleted.
	if got := creationOrder(ordered[:3], at(1), 2, 4); !cmp.Equal(got, []string{"search-gateway-3 not created or never Ready"}) {
		t.Errorf("creationOrder without pod 3 = %v", got)
	}
	if got := deletionOrder(ordered[:3], at(10), 1, 4); !cmp.Equal(got, []string{"search-gateway-3 not deleted, or its process did not exit"}) {
		t.Errorf("deletionOrder without pod 3 = %v", got)
	}
}

// The StatefulSet's manifests: its HPA scales it on its own ReplicasMetric,
// its quota names it, and the variant applies them.
func TestStatefulSetManifests(t *testing.T) {
	dir := t.TempDir()
	if err := WriteManifests(dir); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	var hpa autoscalingv2.HorizontalPodAutoscaler
	var q v1alpha1.DownstreamQuota
	for name, obj := range map[string]any{StatefulSetManifest: &sts, StatefulSetHPAManifest: &hpa, StatefulSetQuotaManifest: &q} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if sts.Name != WorkloadName || sts.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
		t.Errorf("statefulset %s: podManagementPolicy %q", sts.Name, sts.Spec.PodManagementPolicy)
	}
	target := hpa.Spec.ScaleTargetRef
	if target.Kind != cluster.KindStatefulSet || target.Name != WorkloadName || len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Object == nil ||
		hpa.Spec.Metrics[0].Object.DescribedObject.Kind != cluster.KindStatefulSet || hpa.Spec.Metrics[0].Object.Metric.Name != cluster.ReplicasMetric {
		t.Errorf("hpa: target %+v, metrics %+v", target, hpa.Spec.Metrics)
	}
	if ref := q.Spec.WorkloadRef; ref.Kind != cluster.KindStatefulSet || ref.Name != WorkloadName || q.Name != QuotaName || q.Spec.HPAName != WorkloadName {
		t.Errorf("quota %s: workloadRef %+v, hpaName %q", q.Name, ref, q.Spec.HPAName)
	}

	for _, tc := range []struct {
		kind               string
		dictated, operator bool
		want               []string
	}{
		{"", false, true, []string{"deployment.yaml", "hpa.yaml", QuotaManifest}},
		{cluster.KindDeployment, true, false, []string{"deployment.yaml", DictatedHPAManifest}},
		{cluster.KindStatefulSet, true, true, []string{StatefulSetManifest, StatefulSetHPAManifest, StatefulSetQuotaManifest}},
	} {
		got, err := VariantManifests(tc.kind, tc.dictated, tc.operator)
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("VariantManifests(%q, %t, %t) = %v, %v; want %v", tc.kind, tc.dictated, tc.operator, got, err, tc.want)
		}
		for _, m := range got {
			if _, err := os.Stat(filepath.Join(dir, m)); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := VariantManifests(cluster.KindStatefulSet, false, true); err == nil {
		t.Error("a StatefulSet variant without scale steps of its own was accepted")
	}
	if _, err := VariantManifests("DaemonSet", true, true); err == nil {
		t.Error("a DaemonSet variant was accepted")
	}
	// WorkloadManifests is not changed by a dictated variant.
	if WorkloadManifests[1] != "hpa.yaml" {
		t.Errorf("WorkloadManifests = %v", WorkloadManifests)
	}
}
