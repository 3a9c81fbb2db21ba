//go:build unix

package storm

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A Workload whose WorkloadOptions name a StatefulSet plays the StatefulSet
// controller with podManagementPolicy: Parallel instead of the Deployment
// and ReplicaSet controllers: its pods are owned by the StatefulSet and
// named <statefulset>-<ordinal>, the lowest free ordinal first; a scale-down
// deletes the highest ordinals first; its status counts the pods. The HPA,
// scheduler, kubelet and Service are played as for a Deployment.

// newStatefulWorkload reads the StatefulSet and starts the workload.
func newStatefulWorkload(ctx context.Context, opts WorkloadOptions) (*Workload, error) {
	var sts appsv1.StatefulSet
	if err := opts.Client.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.StatefulSet}, &sts); err != nil {
		return nil, fmt.Errorf("storm: get statefulset: %w", err)
	}
	owner := *metav1.NewControllerRef(&sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))
	return startWorkload(opts, "", owner, *sts.Spec.Template.DeepCopy()), nil
}

// ordinal returns the ordinal of a StatefulSet pod's name, or -1.
func ordinal(sts, pod string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(pod, sts+"-"))
	if err != nil || !strings.HasPrefix(pod, sts+"-") {
		return -1
	}
	return n
}

// nameStatefulPod names a new pod with the lowest ordinal no pod has, and
// labels it as the StatefulSet controller does.
func (w *Workload) nameStatefulPod(pod *corev1.Pod) {
	w.mu.Lock()
	taken := map[int]bool{}
	for name := range w.pods {
		taken[ordinal(w.sts, name)] = true
	}
	w.mu.Unlock()
	i := 0
	for taken[i] {
		i++
	}
	pod.GenerateName = ""
	pod.Name = fmt.Sprintf("%s-%d", w.sts, i)
	labels := maps.Clone(pod.Labels)
	labels[appsv1.StatefulSetPodNameLabel] = pod.Name
	labels[appsv1.PodIndexLabel] = strconv.Itoa(i)
	pod.Labels = labels
}

// statefulDeletionOrder puts the highest ordinal first.
func (w *Workload) statefulDeletionOrder(a, b *simPod) int {
	return ordinal(w.sts, b.name) - ordinal(w.sts, a.name)
}

// writeStatefulSetStatus plays the StatefulSet controller writing its
// status.
func (w *Workload) writeStatefulSetStatus(ctx context.Context, active, ready int32) error {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.sts}}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil,
		`{"status":{"replicas":%d,"currentReplicas":%[1]d,"updatedReplicas":%[1]d,"readyReplicas":%d,"availableReplicas":%[2]d}}`, active, ready))
	return w.c.Status().Patch(ctx, sts, patch)
}
