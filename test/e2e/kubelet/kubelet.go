// Package kubelet makes the API writes a node's kubelet makes for a pod, for
// programs that run pods where no kubelet runs: the storm's harness, whose
// pods are OS processes, and the pods command of the local cluster, whose
// pods are the library alone. It registers the node, binds a pod to it as
// the scheduler would, writes the pod's status (Running, then Ready or not)
// and deletes the pod once its containers have stopped.
package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateNode registers a Ready node named name, as a kubelet registers its
// own. No node lifecycle controller runs beside these programs, so its
// status stays as written. A node that exists already is made Ready again.
func CreateNode(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if err := c.Create(ctx, node); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubelet: create node %s: %w", name, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return fmt.Errorf("kubelet: get node %s: %w", name, err)
		}
	}
	now := metav1.NewTime(time.Now())
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
	node.Status = corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "a program plays this node's kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
	}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("kubelet: node %s status: %w", name, err)
	}
	return nil
}

// Bind binds pod to node with a Binding, as the scheduler does. The Binding
// names the pod's UID, so that a pod created again under the name is not
// bound by mistake: then, or when the pod is gone, the error is a conflict
// or NotFound (see Gone).
func Bind(ctx context.Context, c client.Client, pod *corev1.Pod, node string) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	return c.SubResource("binding").Create(ctx, pod, binding)
}

// Gone reports whether err says that the pod a write named no longer exists:
// NotFound, or a conflict on its UID because its name is a new pod's.
func Gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// statusRetry paces SetStatus's attempts after a conflict. Others write
// the pod at the same moment (the library's acknowledgements, the
// controllers' updates), more often than client-go's default five tries in
// 50 ms can outlast: here up to 12 tries over about 4 s.
var statusRetry = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.7, Jitter: 0.1, Cap: time.Second}

// SetStatus writes the status a kubelet writes for a pod whose containers
// run: phase Running, started at started, and Ready (with ContainersReady)
// or not. A pod that no longer exists, or whose name is now another pod's
// (its UID is not uid), is left alone.
func SetStatus(ctx context.Context, c client.Client, namespace, name string, uid types.UID, started metav1.Time, ready bool) error {
	return retry.RetryOnConflict(statusRetry, func() error {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &pod); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if pod.UID != uid {
			return nil
		}
		readyStatus := corev1.ConditionFalse
		if ready {
			readyStatus = corev1.ConditionTrue
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.HostIP = "127.0.0.1"
		pod.Status.PodIP = "127.0.0.1"
		pod.Status.StartTime = &started
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: readyStatus, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: now},
		}
		var statuses []corev1.ContainerStatus
		for _, ct := range pod.Spec.Containers {
			statuses = append(statuses, corev1.ContainerStatus{
				Name:    ct.Name,
				Image:   ct.Image,
				Ready:   ready,
				Started: &ready,
				State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			})
		}
		pod.Status.ContainerStatuses = statuses
		return c.Status().Update(ctx, &pod)
	})
}

// Delete is the kubelet's last word on a pod whose containers have stopped:
// a delete with no grace period, which removes the object. A pod already
// gone, or whose name is now another pod's, is not an error.
func Delete(ctx context.Context, c client.Client, namespace, name string, uid types.UID) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	err := c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
	if err != nil && !Gone(err) {
		return fmt.Errorf("kubelet: delete pod %s/%s: %w", namespace, name, err)
	}
	return nil
}
