package storm

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// The objects of the scenario, as in manifests/.
const (
	// WorkloadName is the Deployment (and its HPA).
	WorkloadName = "search-gateway"
	// QuotaName is the DownstreamQuota, and so the gate's name.
	QuotaName = "logistics-api"
	// ConfigMapName is where the operator publishes the plan:
	// <workload>-backpressure.
	ConfigMapName = WorkloadName + "-backpressure"
)

//go:embed manifests/*.yaml
var manifests embed.FS

// WorkloadManifests are applied in every variant's namespace; QuotaManifest
// only in the operator's.
var (
	WorkloadManifests = []string{"deployment.yaml", "hpa.yaml"}
	QuotaManifest     = "quota.yaml"
)

// StatefulSetManifests and StatefulSetQuotaManifest are their counterparts
// for the StatefulSet caller: the same objects, the workload a StatefulSet.
var (
	StatefulSetManifests     = []string{"statefulset.yaml", "hpa-statefulset.yaml"}
	StatefulSetQuotaManifest = "quota-statefulset.yaml"
)

// WriteManifests copies the scenario's manifests into dir, for kubectl
// apply -f and for a person to read after the run.
func WriteManifests(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := slices.Concat(WorkloadManifests, []string{QuotaManifest}, StatefulSetManifests, []string{StatefulSetQuotaManifest})
	for _, name := range all {
		b, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Quota returns the scenario's DownstreamQuota as manifests/quota.yaml has it.
func Quota() (*v1alpha1.DownstreamQuota, error) {
	b, err := manifests.ReadFile("manifests/" + QuotaManifest)
	if err != nil {
		return nil, err
	}
	var q v1alpha1.DownstreamQuota
	if err := yaml.UnmarshalStrict(b, &q); err != nil {
		return nil, fmt.Errorf("storm: %s: %w", QuotaManifest, err)
	}
	return &q, nil
}
