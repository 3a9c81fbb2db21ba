// Package v1alpha1 holds the DownstreamQuota API: a downstream's global
// contract (in-flight concurrency, optionally rate and burst), the calling
// workload it is divided over, and the per-pod share the operator publishes.
//
// The package depends on the standard library and k8s.io/apimachinery only,
// so that clients can import it cheaply.
//
// +kubebuilder:object:generate=true
// +groupName=backpressure.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "backpressure.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &DownstreamQuota{}, &DownstreamQuotaList{}, &DownstreamContract{}, &DownstreamContractList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
