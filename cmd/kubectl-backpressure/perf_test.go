package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// TestStatusAllLatency measures `kubectl backpressure status -A` over 100
// quotas of 100 Deployments (three pods each) in 10 namespaces, against the
// local API server with client-go's default client-side rate limit, which
// is what bounds a view that reads the cluster object by object. A
// measurement, run with BACKPRESSURE_PERF=1.
func TestStatusAllLatency(t *testing.T) {
	if os.Getenv("BACKPRESSURE_PERF") != "1" {
		t.Skip("a measurement; set BACKPRESSURE_PERF=1 to run it")
	}
	k8s, kubectl := startCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const namespaces, workloads, pods = 10, 10, 3
	container := []corev1.Container{{Name: "app", Image: "registry.example.com/app:1"}}
	for n := range namespaces {
		ns := fmt.Sprintf("team-%d", n)
		create(ctx, t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		for w := range workloads {
			name := fmt.Sprintf("gateway-%d", w)
			app := map[string]string{"app": name}
			create(ctx, t, k8s, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: app},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: corev1.PodSpec{Containers: container}},
			}})
			for p := range pods {
				create(ctx, t, k8s, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, p), Labels: app}, Spec: corev1.PodSpec{Containers: container}})
			}
			q := &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			q.Spec.Downstream = "logistics.example.com"
			q.Spec.WorkloadRef = v1alpha1.WorkloadReference{Kind: "Deployment", Name: name}
			q.Spec.Contract = &v1alpha1.Contract{Concurrency: 50}
			q.Spec.Latency = v1alpha1.Latency{Typical: metav1.Duration{Duration: 40 * time.Millisecond}, Worst: &metav1.Duration{Duration: 200 * time.Millisecond}}
			q.Spec.Deadline = metav1.Duration{Duration: time.Second}
			create(ctx, t, k8s, q)
		}
	}
	for range 3 {
		start := time.Now()
		out, stderr, code := runCLI(t, "status", "-A", "--kubeconfig", kubectl.Kubeconfig)
		took := time.Since(start)
		if code != 0 {
			t.Fatalf("status -A: exit %d, %s", code, stderr)
		}
		t.Logf("status -A over %d quotas in %d namespaces: %s (%d bytes of output)", namespaces*workloads, namespaces, took.Round(time.Millisecond), len(out))
	}
}

func create(ctx context.Context, t *testing.T, k8s client.Client, obj client.Object) {
	t.Helper()
	if err := k8s.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}
