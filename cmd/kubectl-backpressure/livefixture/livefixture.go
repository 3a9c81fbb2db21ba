// Package livefixture puts into a cluster the state that kubectl
// backpressure's live commands are tested against, by the plugin's tests
// and by the check of the docs' live sessions: a workload with its HPA,
// pods that acknowledged some revisions, and a DownstreamQuota whose status
// is set through the status subresource as the operator would have written
// it mid-handover. No operator runs; the status is the fixture's.
package livefixture

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Namespace is the namespace of the quota Quota and its workload.
const Namespace = "storefront"

// Quota is the fixture's DownstreamQuota with a status.
const Quota = "logistics-api"

// Epoch is the epoch of Quota's division, which the pods' annotations
// acknowledge.
const Epoch = "0b7e5a52-5d0e-4bd4-9a43-2c4f3e6d1a10"

// OtherNamespace holds a quota without status, workload or HPA.
const OtherNamespace = "warehouse"

//go:embed storefront.yaml
var manifest []byte

// Apply creates the fixture's objects in order with c and sets the status
// of those that carry one. It fails on any object that exists already, so
// that a test never runs against state it did not make.
func Apply(ctx context.Context, c client.Client) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("livefixture: %w", err)
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return fmt.Errorf("livefixture: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		status, hasStatus := obj.Object["status"]
		delete(obj.Object, "status")
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("livefixture: create %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if !hasStatus {
			continue
		}
		obj.Object["status"] = status
		if err := c.Status().Update(ctx, obj); err != nil {
			return fmt.Errorf("livefixture: status of %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
}
