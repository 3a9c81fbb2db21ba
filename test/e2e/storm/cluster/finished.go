//go:build unix

package cluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReplicaSet returns the ReplicaSet the Deployment controller made for the
// workload's current template: the newest one the Deployment owns.
func (w *Workload) ReplicaSet(ctx context.Context) (*appsv1.ReplicaSet, error) {
	var list appsv1.ReplicaSetList
	if err := w.c.List(ctx, &list, client.InNamespace(w.opts.Namespace)); err != nil {
		return nil, fmt.Errorf("storm: list replicasets: %w", err)
	}
	var newest *appsv1.ReplicaSet
	for i := range list.Items {
		rs := &list.Items[i]
		if ref := metav1.GetControllerOf(rs); ref == nil || ref.Kind != "Deployment" || ref.Name != w.opts.Name {
			continue
		}
		if newest == nil || rs.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = rs
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("storm: deployment %s owns no replicaset", w.opts.Name)
	}
	return newest, nil
}

// CreateFinishedPod creates a pod of rs that ran on the node and finished
// with status, as an evicted or completed pod stays behind: the kubelet
// wrote its final phase, and nothing deletes it (the ReplicaSet controller
// counts only active pods, and its owner exists). The harness's kubelet is
// told first to leave it alone.
//
// A pod is created Pending, whatever status the request carries, and a
// Pending pod of rs is active: the ReplicaSet controller, finding one pod
// too many, would delete it before its final status is written. So it is
// created outside rs (neither its labels nor its owner reference), given its
// final status, and only then made rs's, finished.
func (w *Workload) CreateFinishedPod(ctx context.Context, rs *appsv1.ReplicaSet, name string, status corev1.PodStatus) error {
	w.mu.Lock()
	if w.finished == nil {
		w.finished = map[string]bool{}
	}
	w.finished[name] = true
	w.mu.Unlock()
	t := rs.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   w.opts.Namespace,
			Name:        name,
			Annotations: t.Annotations,
		},
		Spec: t.Spec,
	}
	pod.Spec.NodeName = w.opts.Node
	if err := w.c.Create(ctx, pod); err != nil {
		return fmt.Errorf("storm: create pod %s: %w", name, err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Status = status
		return w.c.Status().Update(ctx, pod)
	})
	if err != nil {
		return fmt.Errorf("storm: set pod %s %s: %w", name, status.Phase, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		pod.Labels = t.Labels
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
		return w.c.Update(ctx, pod)
	})
	if err != nil {
		return fmt.Errorf("storm: make pod %s replicaset %s's: %w", name, rs.Name, err)
	}
	return nil
}
