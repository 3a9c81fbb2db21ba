package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// Workload kinds a quota may name.
const (
	kindDeployment  = "Deployment"
	kindStatefulSet = "StatefulSet"
)

// workloadFacts are a Deployment's or StatefulSet's replica facts.
type workloadFacts struct {
	specReplicas   int32
	statusReplicas int32
	selector       labels.Selector
}

// hpaFacts are the replica facts of the HPA that scales the workload.
type hpaFacts struct {
	name    string
	min     *int32
	max     int32
	current int32
	desired int32
}

// facts is what a reconcile read about a quota's workload.
type facts struct {
	// workload is nil when the workload does not exist.
	workload *workloadFacts
	// hpa is nil when there is no HPA.
	hpa *hpaFacts
	// hpaMissing is set when spec.hpaName names an HPA that does not exist.
	hpaMissing bool
	// pods are the workload's pods that still exist, terminating and
	// finished ones included, as the cache keeps them (stripPod); empty
	// when the workload does not exist.
	pods []corev1.Pod
}

// observe reads the facts of q's workload from the cache. A spec the
// controller cannot follow (a workload kind it does not know) is returned as
// a *quota.FieldError.
func observe(ctx context.Context, c client.Reader, q *v1alpha1.DownstreamQuota) (facts, error) {
	var f facts
	w, err := readWorkload(ctx, c, q)
	if err != nil || w == nil {
		return f, err
	}
	f.workload = w
	if f.hpa, f.hpaMissing, err = readHPA(ctx, c, q); err != nil {
		return f, err
	}
	f.pods, err = listPods(ctx, c, q.Namespace, w.selector)
	return f, err
}

// readWorkload returns the facts of q's workload, or nil when it does not
// exist.
func readWorkload(ctx context.Context, c client.Reader, q *v1alpha1.DownstreamQuota) (*workloadFacts, error) {
	ref := q.Spec.WorkloadRef
	key := client.ObjectKey{Namespace: q.Namespace, Name: ref.Name}
	var (
		replicas *int32
		status   int32
		selector *metav1.LabelSelector
	)
	switch ref.Kind {
	case kindDeployment:
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return nil, ignoreNotFound(err, "deployment %s", key)
		}
		replicas, status, selector = d.Spec.Replicas, d.Status.Replicas, d.Spec.Selector
	case kindStatefulSet:
		var s appsv1.StatefulSet
		if err := c.Get(ctx, key, &s); err != nil {
			return nil, ignoreNotFound(err, "statefulset %s", key)
		}
		replicas, status, selector = s.Spec.Replicas, s.Status.Replicas, s.Spec.Selector
	default:
		return nil, &quota.FieldError{Field: "spec.workloadRef.kind", Detail: fmt.Sprintf("must be %s or %s, got %q", kindDeployment, kindStatefulSet, ref.Kind)}
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("controller: %s %s: selector: %w", ref.Kind, key, err)
	}
	// The API server defaults spec.replicas to 1.
	return &workloadFacts{specReplicas: ptr.Deref(replicas, 1), statusReplicas: status, selector: sel}, nil
}

// readHPA returns the facts of the HPA named by spec.hpaName, or else of the
// HPA whose scaleTargetRef names the workload. missing is set when the named
// HPA does not exist; no HPA at all is not a problem.
func readHPA(ctx context.Context, c client.Reader, q *v1alpha1.DownstreamQuota) (h *hpaFacts, missing bool, err error) {
	if name := q.Spec.HPAName; name != "" {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		key := client.ObjectKey{Namespace: q.Namespace, Name: name}
		if err := c.Get(ctx, key, &hpa); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("controller: get hpa %s: %w", key, err)
		}
		return hpaFactsOf(&hpa), false, nil
	}
	var list autoscalingv2.HorizontalPodAutoscalerList
	target := quota.WorkloadKey(q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name)
	if err := c.List(ctx, &list, client.InNamespace(q.Namespace), client.MatchingFields{indexer.HPATargetKey: target}); err != nil {
		return nil, false, fmt.Errorf("controller: list hpas of %s: %w", target, err)
	}
	return pickHPA(list.Items), false, nil
}

// pickHPA returns the facts of the HPA that wants the most replicas, or nil
// when there is none. Two HPAs on one workload fight over it; the larger
// desired count is the safe divisor. Ties go to the first name.
func pickHPA(hpas []autoscalingv2.HorizontalPodAutoscaler) *hpaFacts {
	if len(hpas) == 0 {
		return nil
	}
	best := slices.MinFunc(hpas, func(a, b autoscalingv2.HorizontalPodAutoscaler) int {
		return cmp.Or(cmp.Compare(b.Status.DesiredReplicas, a.Status.DesiredReplicas), cmp.Compare(a.Name, b.Name))
	})
	return hpaFactsOf(&best)
}

func hpaFactsOf(hpa *autoscalingv2.HorizontalPodAutoscaler) *hpaFacts {
	h := &hpaFacts{
		name:    hpa.Name,
		max:     hpa.Spec.MaxReplicas,
		current: hpa.Status.CurrentReplicas,
		desired: hpa.Status.DesiredReplicas,
	}
	if hpa.Spec.MinReplicas != nil {
		h.min = ptr.To(*hpa.Spec.MinReplicas)
	}
	return h
}

// listPods returns the pods in namespace that match selector, from the
// manager's cache, which keeps of each only what stripPod leaves.
func listPods(ctx context.Context, c client.Reader, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("controller: list pods in %s: %w", namespace, err)
	}
	return list.Items, nil
}

// ignoreNotFound returns nil for a NotFound error and wraps any other error
// with what was being read.
func ignoreNotFound(err error, format string, args ...any) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("controller: get "+format+": %w", append(args, err)...)
}
