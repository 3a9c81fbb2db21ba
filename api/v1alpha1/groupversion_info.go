// Package v1alpha1 holds the DownstreamQuota API: a downstream's global
// contract (in-flight concurrency, optionally rate and burst), the calling
// workload it is divided over, and the per-pod share the operator publishes.
//
// +kubebuilder:object:generate=true
// +groupName=backpressure.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "backpressure.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
