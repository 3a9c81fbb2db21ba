package storm

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
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

// DictatedHPAManifest is hpa.yaml turned by DictateHPA into the HPA of a
// scenario with scale steps of its own; WriteManifests writes it too.
const DictatedHPAManifest = "hpa-dictated.yaml"

// WriteManifests copies the scenario's manifests into dir, for kubectl
// apply -f and for a person to read after the run.
func WriteManifests(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range append(WorkloadManifests, QuotaManifest) {
		b, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	b, err := manifests.ReadFile("manifests/hpa.yaml")
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, &hpa); err != nil {
		return fmt.Errorf("storm: hpa.yaml: %w", err)
	}
	DictateHPA(&hpa)
	if b, err = yaml.Marshal(&hpa); err != nil {
		return err
	}
	b = append([]byte("# hpa.yaml for a scenario with scale steps of its own: the HPA follows the\n# replica count the scenario sets (storm.DictateHPA).\n"), b...)
	return os.WriteFile(filepath.Join(dir, DictatedHPAManifest), b, 0o644)
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
