package main

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

// The ConfigMap source against a real API server: the gateway follows the
// ConfigMap, enforces the share its pod ($POD_NAME) is given, and, with
// --acknowledge, annotates its own pod with "<epoch>/<revision>" of every
// plan it enforces and "<epoch>/released" when it stops.
func TestConfigMapSourceAndAcknowledgement(t *testing.T) {
	env, cfg := testenv.Start(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := t.Context()
	const ns, cmName, podName = "shop", "search-gateway-backpressure", "search-gateway-7d9f-x2x4q"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "gateway:test"}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := testPlan(2, 0)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: ns},
		Data:       map[string]string{plan.KeyFor(testGate): mustMarshal(t, first)},
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ds := newDownstream(t)
	p := startBinary(t, []string{backpressure.EnvPodName + "=" + podName, backpressure.EnvPodNamespace + "=" + ns},
		"--listen", "127.0.0.1:0", "--downstream", ds.URL, "--gate", testGate,
		"--configmap", cmName, "--kubeconfig", kubeconfig, "--acknowledge")
	addr := p.address(t)
	annotation := plan.AppliedAnnotationPrefix + testGate
	waitForAnnotation(t, client, ns, podName, annotation, plan.AckFor(first).String())

	// A new plan in the ConfigMap giving this pod a share of its own:
	// applied, logged and acknowledged.
	second := testPlan(5, 0)
	second.Pods = map[string]plan.PodShare{
		podName:                     {Permits: 3, Workers: 3, RetryBudgetPerSecond: 10},
		"search-gateway-7d9f-other": {Permits: 7, Workers: 7, RetryBudgetPerSecond: 10},
	}
	// A newer revision of the epoch, as the operator publishes it: a pod
	// refuses an older one.
	second.Revision = first.Revision + 1
	second.Hash = plan.Hash(second)
	cm.Data[plan.KeyFor(testGate)] = mustMarshal(t, second)
	updated := time.Now()
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForAnnotation(t, client, ns, podName, annotation, plan.AckFor(second).String())
	var applied map[string]any
	for _, e := range withMsg(p.log.entries(t), "Applied plan") {
		if e["hash"] == second.Hash {
			applied = e
		}
	}
	if applied == nil || applied["permits"] != float64(3) {
		t.Fatalf("no Applied plan line for the new plan:\n%s", p.log)
	}
	at, err := time.Parse(time.RFC3339Nano, applied["time"].(string))
	if err != nil || at.Before(updated.Add(-time.Millisecond)) {
		t.Errorf("Applied plan at %v, before the ConfigMap update at %v (err %v)", applied["time"], updated, err)
	}
	t.Logf("ConfigMap update to plan applied: %v", at.Sub(updated))

	if resp, body := get(t, "http://"+addr+"/"); resp.StatusCode != 200 || body != "quote 42\n" {
		t.Errorf("GET /: %d %q", resp.StatusCode, body)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("exit code %d:\n%s", code, p.log)
	}
	// The share was handed back before the process exited.
	waitForAnnotation(t, client, ns, podName, annotation, plan.Ack{Epoch: second.Epoch, Released: true}.String())
}

func waitForAnnotation(t *testing.T, client kubernetes.Interface, ns, pod, key, want string) {
	t.Helper()
	eventually(t, 10*time.Second, "the pod carries "+key+": "+want, func() bool {
		p, err := client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Annotations[key] == want
	})
}

func mustMarshal(t testing.TB, d plan.Document) string {
	t.Helper()
	b, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
