package perf

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpcontroller "github.com/backpressure-dev/backpressure-operator/internal/controller"
)

// TestPodCacheMemory fills an informer cache with realistic pods (by
// default 5,000: two containers with env, probes, resources and mounts,
// four volumes, a full status) and reports the Go heap each pod costs in
// it, cached as the controller caches them (metadata, phase and Ready) and,
// for comparison, whole (with and without managed fields) and as metadata
// only.
func TestPodCacheMemory(t *testing.T) {
	requirePerf(t)
	n := envInt(t, "BACKPRESSURE_PERF_MEMORY_PODS", 5000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg, k8s := startAPIServer(t)
	const ns = "memory"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const workloads = 100
	createPods(ctx, t, k8s, n, func(i int) *corev1.Pod {
		return realisticPod(ns, fmt.Sprintf("app-%03d", i%workloads), i)
	})
	t.Logf("set-up: %d pods in %s", n, time.Since(start).Round(time.Millisecond))

	strip := cache.TransformStripManagedFields()
	podMeta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	variants := []struct {
		name string
		opts cache.Options
		obj  client.Object
	}{
		{"as the controller caches them (metadata, phase, Ready; CacheOptions)", bpcontroller.CacheOptions(), &corev1.Pod{}},
		{"metadata only (PartialObjectMetadata, managed fields dropped)", cache.Options{DefaultTransform: strip}, podMeta},
		{"whole, managed fields dropped", cache.Options{DefaultTransform: strip}, &corev1.Pod{}},
		{"whole, as served", cache.Options{}, &corev1.Pod{}},
	}
	perPod := make([]float64, len(variants))
	for i, v := range variants {
		perPod[i] = cacheHeapPerPod(ctx, t, cfg, v.opts, v.obj, n)
		t.Logf("pod cache memory, %s: %.0f B of heap in use per pod (%d pods)", v.name, perPod[i], n)
	}
	if perPod[0] >= perPod[2] {
		t.Errorf("the controller's pod cache holds %.0f B per pod, no less than whole pods (%.0f B)", perPod[0], perPod[2])
	}
}

// createPods creates n pods built by pod, with 16 concurrent writers, and
// writes each one's status (which a create does not keep).
func createPods(ctx context.Context, t *testing.T, k8s client.Client, n int, pod func(i int) *corev1.Pod) {
	t.Helper()
	forEach(t, 16, n, func(i int) error {
		p := pod(i)
		status := p.Status
		if err := k8s.Create(ctx, p); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		p.Status = status
		if err := k8s.Status().Update(ctx, p); err != nil {
			return fmt.Errorf("update the status of pod %s: %w", p.Name, err)
		}
		return nil
	})
}

// cacheHeapPerPod starts a cache built with opts (and the test's scheme),
// informs it of obj's kind, and returns the Go heap in use that it holds
// once synced, divided by the n pods it must hold.
func cacheHeapPerPod(ctx context.Context, t *testing.T, cfg *rest.Config, opts cache.Options, obj client.Object, n int) float64 {
	t.Helper()
	before := heapInUse()
	opts.Scheme = newScheme(t)
	c, err := cache.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, obj); err != nil {
		t.Fatal(err)
	}
	cacheCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Start(cacheCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the pod cache did not sync")
	}
	list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	var count int
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
		count = len(list.Items)
	} else {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
		count = len(pods.Items)
	}
	if count != n {
		t.Fatalf("the pod cache holds %d pods, want %d", count, n)
	}
	list = nil
	after := heapInUse()
	runtime.KeepAlive(c)
	return (float64(after) - float64(before)) / float64(n)
}

// heapInUse returns the Go heap's in-use bytes after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// templateHash is the pod-template-hash of every realisticPod.
const templateHash = "7d9f8c6b5"

// podName is the name of realisticPod i of workload.
func podName(workload string, i int) string {
	return fmt.Sprintf("%s-%s-%05d", workload, templateHash, i)
}

// realisticPod returns pod i of a Deployment named workload as its
// ReplicaSet creates it, with what a typical service's pod holds: an
// application container and a sidecar with env, ports, probes, resources
// and mounts, a ConfigMap, a Secret, an emptyDir and the service account
// token volume, and, in its status, the five conditions of a Ready pod and
// both containers' statuses.
func realisticPod(ns, workload string, i int) *corev1.Pod {
	started := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	env := []corev1.EnvVar{
		{Name: "DOWNSTREAM_URL", Value: "https://logistics.example.com/v2"},
		{Name: "LOG_LEVEL", Value: "info"},
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability:4317"},
		{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: workload + "-db"}, Key: "password"}}},
		{Name: "FEATURE_FLAGS", Value: "search-v2,ranking-experiment,cache-warmup"},
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: 5, TimeoutSeconds: 1, FailureThreshold: 3,
		}
	}
	resources := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		}
	}
	labels := map[string]string{"app": workload, "pod-template-hash": templateHash, "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.42.0"}
	condition := func(typ corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	containerStatus := func(name, image string) corev1.ContainerStatus {
		return corev1.ContainerStatus{
			Name: name, Image: image, ImageID: image + "@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
			ContainerID: fmt.Sprintf("containerd://%064x", i), Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: podName(workload, i), Labels: labels,
			Annotations: map[string]string{"kubectl.kubernetes.io/default-container": "app", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: workload + "-" + templateHash,
				UID: types.UID("00000000-0000-0000-0000-" + fmt.Sprintf("%012d", i)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{
					Name: "app", Image: "registry.example/shop/" + workload + ":1.42.0", Env: env,
					Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
					Resources:      resources("500m", "512Mi"),
					ReadinessProbe: probe("/readyz"), LivenessProbe: probe("/healthz"),
					VolumeMounts: []corev1.VolumeMount{
						{Name: "config", MountPath: "/etc/app"}, {Name: "backpressure", MountPath: "/etc/backpressure"},
						{Name: "tmp", MountPath: "/tmp"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
					},
					SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)},
				},
				{
					Name: "proxy", Image: "registry.example/envoy:1.31.2", Args: []string{"--config-path", "/etc/envoy/envoy.yaml", "--log-level", "warn"},
					Ports:     []corev1.ContainerPort{{Name: "admin", ContainerPort: 15000}},
					Resources: resources("100m", "128Mi"),
					VolumeMounts: []corev1.VolumeMount{
						{Name: "config", MountPath: "/etc/envoy"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
					},
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: workload + "-config"}}}},
				{Name: "backpressure", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: workload + "-backpressure"}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
			NodeName:           fmt.Sprintf("node-%02d", i%40),
			ServiceAccountName: workload,
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				condition("PodReadyToStartContainers"), condition(corev1.PodInitialized), condition(corev1.PodReady),
				condition(corev1.ContainersReady), condition(corev1.PodScheduled),
			},
			HostIP: fmt.Sprintf("10.0.%d.%d", i%40/250, i%40), PodIP: fmt.Sprintf("10.1.%d.%d", i/250%250, i%250),
			PodIPs:    []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", i/250%250, i%250)}},
			StartTime: &started, QOSClass: corev1.PodQOSGuaranteed,
			ContainerStatuses: []corev1.ContainerStatus{
				containerStatus("app", "registry.example/shop/"+workload+":1.42.0"), containerStatus("proxy", "registry.example/envoy:1.31.2"),
			},
		},
	}
}
