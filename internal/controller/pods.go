package controller

import (
	corev1 "k8s.io/api/core/v1"
)

// stripPod keeps of a pod what the controller reads: its metadata (labels,
// the acknowledgement annotations, the deletion timestamp), its phase and
// its Ready condition. The rest of the spec and status, most of a pod's
// size, never reaches the cache. The controller never writes a pod, so no
// partial object is ever sent back.
func stripPod(next func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, err
		}
		status := corev1.PodStatus{Phase: pod.Status.Phase}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady {
				status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
			}
		}
		pod.Spec = corev1.PodSpec{}
		pod.Status = status
		return pod, err
	}
}

// podReady reports whether the pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFinished reports whether the pod's containers have all stopped for
// good (Succeeded or Failed, as an evicted pod is): it holds no calls and
// takes no share, even while it still exists.
func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// podLeaving reports whether the pod is terminating.
func podLeaving(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }

// podServing reports whether the pod is one the usable permits are divided
// over: Ready, and neither terminating nor finished.
func podServing(pod *corev1.Pod) bool {
	return podReady(pod) && !podLeaving(pod) && !podFinished(pod)
}
