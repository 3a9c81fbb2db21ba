package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// testFinalizer keeps a deleted pod terminating until the test, playing the
// kubelet, lets it go.
const testFinalizer = "test.backpressure.dev/terminating"

var namespaceSeq atomic.Int32

// newNamespace creates a namespace of its own for one spec.
func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("t%d-%d", GinkgoParallelProcess(), namespaceSeq.Add(1))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

// newDeployment returns a Deployment of replicas whose pods carry
// app=<name>.
func newDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
		},
	}
}

// newQuota returns a quota of concurrency over the Deployment workload, at
// the default 80% safety.
func newQuota(ns, name, workload string, concurrency int32) *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: workload},
			Downstream:  name + ".example.com",
			Contract:    &v1alpha1.Contract{Concurrency: concurrency},
			Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 220 * time.Millisecond}},
			Deadline:    metav1.Duration{Duration: 2 * time.Second},
		},
	}
}

// newHPA returns an HPA on the Deployment workload.
func newHPA(ns, name, workload string, minReplicas, maxReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: workload},
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    maxReplicas,
		},
	}
}

// createPod creates a pod of the Deployment workload, held by the test
// finalizer so that deleting it leaves it terminating.
func createPod(ctx context.Context, ns, workload, name string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels:     map[string]string{"app": workload},
			Finalizers: []string{testFinalizer},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	return pod
}

// releasePod removes the test finalizer, so a deleted pod goes.
func releasePod(ctx context.Context, pod *corev1.Pod) {
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(f string) bool { return f == testFinalizer })
	Expect(k8s.Update(ctx, pod)).To(Succeed())
}

// scaleDeployment sets spec.replicas through the scale subresource, as the
// HPA does.
func scaleDeployment(ctx context.Context, d *appsv1.Deployment, replicas int32) {
	scale := &autoscalingv1.Scale{}
	Expect(k8s.SubResource("scale").Get(ctx, d, scale)).To(Succeed())
	scale.Spec.Replicas = replicas
	Expect(k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale))).To(Succeed())
}

// setHPAStatus writes the HPA's status, as the HPA controller does after it
// scaled the workload.
func setHPAStatus(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32) {
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hpa), hpa)).To(Succeed())
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired}
	Expect(k8s.Status().Update(ctx, hpa)).To(Succeed())
}

// getQuota reads a quota.
func getQuota(ctx context.Context, g Gomega, ns, name string) *v1alpha1.DownstreamQuota {
	q := &v1alpha1.DownstreamQuota{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, q)).To(Succeed())
	return q
}

// ready returns q's Ready condition, failing when there is none.
func ready(g Gomega, q *v1alpha1.DownstreamQuota) metav1.Condition {
	c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
	g.Expect(c).NotTo(BeNil(), "quota %s has no Ready condition", q.Name)
	return *c
}

// publishedDocument reads quota's document from the ConfigMap.
func publishedDocument(ctx context.Context, g Gomega, ns, configMap, quota string) (plan.Document, *corev1.ConfigMap) {
	cm := &corev1.ConfigMap{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: configMap}, cm)).To(Succeed())
	data, ok := cm.Data[plan.KeyFor(quota)]
	g.Expect(ok).To(BeTrue(), "ConfigMap %s has no key for %s; keys: %v", configMap, quota, keys(cm.Data))
	doc, err := plan.Parse([]byte(data))
	g.Expect(err).NotTo(HaveOccurred())
	return doc, cm
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// configMapGone reports whether the ConfigMap does not exist.
func configMapGone(ctx context.Context, g Gomega, ns, name string) bool {
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	return apierrors.IsNotFound(err)
}

// quotaEvents lists the events.k8s.io events about a quota, oldest first.
func quotaEvents(ctx context.Context, g Gomega, ns, quota string) []eventsv1.Event {
	var list eventsv1.EventList
	g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "DownstreamQuota" && e.Regarding.Name == quota {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	return out
}

// notes returns the reason and note of each event, "Reason: note".
func notes(events []eventsv1.Event) []string {
	out := make([]string, 0, len(events))
	for _, e := range events {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out
}

// acknowledge annotates the pods with quota's current hash, as the runtime
// library does once it applied the plan.
func acknowledge(ctx context.Context, quota, hash string, pods ...*corev1.Pod) {
	for _, pod := range pods {
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[appliedAnnotation(quota)] = hash
		Expect(k8s.Patch(ctx, pod, patch)).To(Succeed())
	}
}

// containsSubstring matches a string slice with an element containing s.
func containsSubstring(s string) OmegaMatcher {
	return ContainElement(ContainSubstring(s))
}

// settledWrites waits until the manager's count of writes to namespace
// holds still for half a second, and returns it.
func settledWrites(namespace string) int {
	last := -1
	Eventually(func() bool {
		n := writes.TotalIn(namespace)
		still := n == last
		last = n
		return still
	}).WithPolling(500 * time.Millisecond).Should(BeTrue())
	return last
}
