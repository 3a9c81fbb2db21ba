package controller

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/internal/quota"
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

// podOwner says what a pod's controller owner reference tells about the
// workload it belongs to.
type podOwner int

const (
	// ownerUnknown: the pod has no controller, or one the workload cannot be
	// told from (a ReplicaSet whose name is not <deployment>-<hash>); only
	// the workloads' selectors can tell.
	ownerUnknown podOwner = iota
	// ownerWorkload: the pod's controller is a StatefulSet, or a ReplicaSet
	// that a Deployment made; the workload is known.
	ownerWorkload
	// ownerOther: the pod's controller is of another kind (a Job, a
	// DaemonSet, ...); it belongs to no workload a quota may name.
	ownerOther
)

// podWorkload returns quota.WorkloadKey of the Deployment or StatefulSet
// that controls pod, read from its controller owner reference alone: a
// StatefulSet controls its pods directly; a Deployment controls a
// ReplicaSet named <deployment>-<pod-template-hash>, whose pods carry the
// hash as a label. A Deployment name long enough for the Deployment
// controller to have cut it short in the ReplicaSet's name cannot be told
// from it, and neither can a ReplicaSet no Deployment made: both are
// ownerUnknown.
func podWorkload(pod client.Object) (string, podOwner) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return "", ownerUnknown
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != appsv1.GroupName {
		return "", ownerOther
	}
	switch ref.Kind {
	case kindStatefulSet:
		return quota.WorkloadKey(kindStatefulSet, ref.Name), ownerWorkload
	case "ReplicaSet":
		hash := pod.GetLabels()[appsv1.DefaultDeploymentUniqueLabelKey]
		name, ok := strings.CutSuffix(ref.Name, "-"+hash)
		// The Deployment controller cuts the Deployment's name so that the
		// ReplicaSet's fits in a DNS subdomain: a name of exactly that
		// length may be the start of a longer one.
		if hash == "" || !ok || name == "" || len(name) >= validation.DNS1123SubdomainMaxLength-1-len(hash) {
			return "", ownerUnknown
		}
		return quota.WorkloadKey(kindDeployment, name), ownerWorkload
	}
	return "", ownerOther
}
