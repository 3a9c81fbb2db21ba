//go:build unix

package cluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The objects that route the custom metrics API to the harness.
const (
	// MetricsServiceNamespace and MetricsService name the Service the
	// APIService points at: an ExternalName service for localhost, which
	// the aggregator resolves without a cluster network (it dials
	// <externalName>:<the APIService's port>).
	MetricsServiceNamespace = "storm-metrics"
	MetricsService          = "custom-metrics"
)

// configureAggregation makes the certificates for the aggregation layer
// and adds the flags that turn on its front-proxy authentication to the
// API server, which must not have started yet.
func configureAggregation(env *envtest.Environment, dir string) (*AggregationPKI, error) {
	pki, err := NewAggregationPKI(filepath.Join(dir, "pki"), MetricsService, MetricsServiceNamespace)
	if err != nil {
		return nil, fmt.Errorf("storm: aggregation certificates: %w", err)
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for k, v := range pki.APIServerArgs() {
		args.Set(k, v)
	}
	return pki, nil
}

// RegisterMetricsAPI creates the Service and the APIService that route
// custom.metrics.k8s.io/v1beta2 to m, and waits until the API server
// reports the APIService Available.
func RegisterMetricsAPI(ctx context.Context, c client.Client, m *MetricsAPI, pki *AggregationPKI) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: MetricsServiceNamespace}}
	if err := c.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("storm: create namespace %s: %w", ns.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: MetricsServiceNamespace, Name: MetricsService},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if err := c.Create(ctx, svc); err != nil {
		return fmt.Errorf("storm: create service %s: %w", svc.Name, err)
	}
	name := CustomMetricsVersion + "." + CustomMetricsGroup
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group":                CustomMetricsGroup,
			"version":              CustomMetricsVersion,
			"groupPriorityMinimum": int64(100),
			"versionPriority":      int64(100),
			"service": map[string]any{
				"namespace": MetricsServiceNamespace,
				"name":      MetricsService,
				"port":      int64(m.Port()),
			},
			"caBundle": base64.StdEncoding.EncodeToString(pki.ServingCABundle),
		},
	}}
	if err := c.Create(ctx, apiService); err != nil {
		return fmt.Errorf("storm: create apiservice %s: %w", name, err)
	}
	var last string
	err := WaitFor(ctx, 60*time.Second, "the APIService "+name+" becoming Available", func() (bool, error) {
		got := &unstructured.Unstructured{}
		got.SetAPIVersion("apiregistration.k8s.io/v1")
		got.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last condition: %s)", err, last)
	}
	return nil
}
