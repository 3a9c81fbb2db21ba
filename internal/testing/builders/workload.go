package builders

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Image is the container image of every pod the builders make; no node
// pulls it.
const Image = "registry.example/app:1"

// AppLabel is the label the builders' workloads select their pods by: a
// pod of workload w carries app=w.
const AppLabel = "app"

// podTemplate is the template of a workload's pods: app=<name>, one
// container named app.
func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{AppLabel: name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: Image}}},
	}
}

// DeploymentWrapper wraps a Deployment while a test builds it.
type DeploymentWrapper struct{ appsv1.Deployment }

// MakeDeployment returns a Deployment of one replica whose pods carry
// app=<name>.
func MakeDeployment(ns, name string) *DeploymentWrapper {
	return &DeploymentWrapper{appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: name}},
			Template: podTemplate(name),
		},
	}}
}

// Replicas sets spec.replicas.
func (w *DeploymentWrapper) Replicas(n int32) *DeploymentWrapper {
	w.Spec.Replicas = ptr.To(n)
	return w
}

// Obj returns the Deployment.
func (w *DeploymentWrapper) Obj() *appsv1.Deployment { return w.DeepCopy() }

// StatefulSetWrapper wraps a StatefulSet while a test builds it.
type StatefulSetWrapper struct{ appsv1.StatefulSet }

// MakeStatefulSet returns a StatefulSet of one replica whose pods carry
// app=<name>.
func MakeStatefulSet(ns, name string) *StatefulSetWrapper {
	return &StatefulSetWrapper{appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: name}},
			ServiceName: name,
			Template:    podTemplate(name),
		},
	}}
}

// Replicas sets spec.replicas.
func (w *StatefulSetWrapper) Replicas(n int32) *StatefulSetWrapper {
	w.Spec.Replicas = ptr.To(n)
	return w
}

// Obj returns the StatefulSet.
func (w *StatefulSetWrapper) Obj() *appsv1.StatefulSet { return w.DeepCopy() }

// PodWrapper wraps a Pod while a test builds it.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a Pod of no workload with one container, as created:
// Pending, not Ready.
func MakePod(ns, name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: Image}}},
	}}
}

// Of makes the pod one of the builders' workload named workload: it
// carries app=<workload>.
func (w *PodWrapper) Of(workload string) *PodWrapper {
	return w.Labels(map[string]string{AppLabel: workload})
}

// Labels adds labels to the pod's.
func (w *PodWrapper) Labels(labels map[string]string) *PodWrapper {
	if w.ObjectMeta.Labels == nil {
		w.ObjectMeta.Labels = map[string]string{}
	}
	for k, v := range labels {
		w.ObjectMeta.Labels[k] = v
	}
	return w
}

// Annotation sets an annotation.
func (w *PodWrapper) Annotation(key, value string) *PodWrapper {
	if w.Annotations == nil {
		w.Annotations = map[string]string{}
	}
	w.Annotations[key] = value
	return w
}

// Finalizers sets the pod's finalizers: a test that plays the kubelet keeps
// a deleted pod terminating with one.
func (w *PodWrapper) Finalizers(f ...string) *PodWrapper {
	w.ObjectMeta.Finalizers = f
	return w
}

// Running sets the pod's phase Running, and its Ready condition to ready, as
// the kubelet writes them.
func (w *PodWrapper) Running(ready bool) *PodWrapper {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	w.Status.Phase = corev1.PodRunning
	w.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return w
}

// Obj returns the Pod.
func (w *PodWrapper) Obj() *corev1.Pod { return w.DeepCopy() }
