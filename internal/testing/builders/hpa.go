package builders

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// HPAWrapper wraps a HorizontalPodAutoscaler while a test builds it.
type HPAWrapper struct {
	autoscalingv2.HorizontalPodAutoscaler
}

// MakeHPA returns an HPA of the Deployment named like it, from 1 to 20
// replicas, with no metric and no status.
func MakeHPA(ns, name string) *HPAWrapper {
	return &HPAWrapper{autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    20,
		},
	}}
}

// Target sets the workload the HPA scales: a Deployment or a StatefulSet.
func (w *HPAWrapper) Target(kind, name string) *HPAWrapper {
	w.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: kind, Name: name}
	return w
}

// Replicas sets spec.minReplicas and spec.maxReplicas.
func (w *HPAWrapper) Replicas(minReplicas, maxReplicas int32) *HPAWrapper {
	w.Spec.MinReplicas, w.Spec.MaxReplicas = ptr.To(minReplicas), maxReplicas
	return w
}

// Status sets status.currentReplicas and status.desiredReplicas, as the
// HPA controller writes them.
func (w *HPAWrapper) Status(current, desired int32) *HPAWrapper {
	w.HorizontalPodAutoscaler.Status = autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: current, DesiredReplicas: desired}
	return w
}

// Obj returns the HPA.
func (w *HPAWrapper) Obj() *autoscalingv2.HorizontalPodAutoscaler {
	return w.DeepCopy()
}
