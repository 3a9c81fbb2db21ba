package storm

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
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

// The StatefulSet scenario's manifests: statefulset.yaml, and
// hpa-dictated.yaml and quota.yaml aimed at it, which WriteManifests
// writes.
const (
	StatefulSetManifest      = "statefulset.yaml"
	StatefulSetHPAManifest   = "hpa-dictated-statefulset.yaml"
	StatefulSetQuotaManifest = "quota-statefulset.yaml"
)

// VariantManifests returns the manifests a variant applies in its
// namespace, as WriteManifests names them: its workload (a Deployment, or a
// StatefulSet for kind KindStatefulSet) and its HPA, dictated when the
// schedule has scale steps of its own, and with the operator the quota. A
// StatefulSet's HPA is always dictated.
func VariantManifests(kind string, dictated, operator bool) ([]string, error) {
	var out []string
	switch kind {
	case "", cluster.KindDeployment:
		out = slices.Clone(WorkloadManifests)
		if dictated {
			out[1] = DictatedHPAManifest
		}
		if operator {
			out = append(out, QuotaManifest)
		}
	case cluster.KindStatefulSet:
		if !dictated {
			return nil, errors.New("storm: a StatefulSet variant needs a schedule with scale steps of its own")
		}
		out = []string{StatefulSetManifest, StatefulSetHPAManifest}
		if operator {
			out = append(out, StatefulSetQuotaManifest)
		}
	default:
		return nil, fmt.Errorf("storm: workload kind %q: must be %s or %s", kind, cluster.KindDeployment, cluster.KindStatefulSet)
	}
	return out, nil
}

// WriteManifests copies the scenario's manifests into dir, for kubectl
// apply -f and for a person to read after the run.
func WriteManifests(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range append(WorkloadManifests, QuotaManifest, StatefulSetManifest) {
		b, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	write := func(name, header string, obj any) error {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), append([]byte(header), b...), 0o644)
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	b, err := manifests.ReadFile("manifests/hpa.yaml")
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, &hpa); err != nil {
		return fmt.Errorf("storm: hpa.yaml: %w", err)
	}
	cluster.DictateHPA(&hpa)
	if err := write(DictatedHPAManifest, "# hpa.yaml for a scenario with scale steps of its own: the HPA follows the\n# replica count the scenario sets (storm.DictateHPA).\n", &hpa); err != nil {
		return err
	}
	// The StatefulSet's: the same, aimed at it. DictateHPA describes the
	// metric's object from the target.
	hpa.Spec.ScaleTargetRef.Kind = cluster.KindStatefulSet
	cluster.DictateHPA(&hpa)
	if err := write(StatefulSetHPAManifest, "# "+DictatedHPAManifest+" aimed at "+StatefulSetManifest+"'s StatefulSet: the real HPA controller scales it\n# through its scale subresource.\n", &hpa); err != nil {
		return err
	}
	q, err := Quota()
	if err != nil {
		return err
	}
	q.Spec.WorkloadRef.Kind = cluster.KindStatefulSet
	return write(StatefulSetQuotaManifest, "# quota.yaml aimed at "+StatefulSetManifest+"'s StatefulSet.\n", q)
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
