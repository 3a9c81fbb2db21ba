package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheOptions returns the manager cache options the controller is built
// for. They keep the cache small:
//
//   - only ConfigMaps labelled ManagedByLabel=ManagedByValue are cached;
//     the controller asks the API server about any other name it needs;
//   - managed fields are dropped from every cached object;
//   - Deployments and StatefulSets are cached without their pod templates
//     and conditions, which the controller never reads (it never writes a
//     workload either, so no partial object is ever sent back);
//   - pods are cached as their metadata, phase and Ready condition only
//     (stripPod): the division needs to know which pods are Ready, and
//     nothing else of their spec or status.
func CacheOptions() cache.Options {
	strip := cache.TransformStripManagedFields()
	return cache.Options{
		DefaultTransform: strip,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:   {Label: labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue})},
			&appsv1.Deployment{}:  {Transform: stripWorkload(strip)},
			&appsv1.StatefulSet{}: {Transform: stripWorkload(strip)},
			&corev1.Pod{}:         {Transform: stripPod(strip)},
		},
	}
}

// stripWorkload drops what the controller never reads from a Deployment or
// StatefulSet, after next.
func stripWorkload(next func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		obj, err := next(obj)
		switch w := obj.(type) {
		case *appsv1.Deployment:
			w.Spec.Template = corev1.PodTemplateSpec{}
			w.Status.Conditions = nil
		case *appsv1.StatefulSet:
			w.Spec.Template = corev1.PodTemplateSpec{}
			w.Spec.VolumeClaimTemplates = nil
			w.Status.Conditions = nil
		}
		return obj, err
	}
}
