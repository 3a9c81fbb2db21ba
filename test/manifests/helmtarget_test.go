package manifests

import (
	"errors"
	"os/exec"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// make helm-template renders the chart without a cluster, which the pinned
// helm does only when told a Kubernetes version the chart's kubeVersion
// admits: the whole install, CRDs included, with HELM_ARGS applied.
func TestMakeHelmTemplate(t *testing.T) {
	cmd := exec.Command("make", "-s", "--no-print-directory", "helm-template", "HELM_ARGS=--set image.tag=v0.2.0")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("make helm-template: %v\n%s", err, stderr)
	}
	objs := decode(t, out)
	if n := len(find(objs, "CustomResourceDefinition")); n != 2 {
		t.Errorf("make helm-template rendered %d CRDs, want the DownstreamQuota's and the DownstreamContract's", n)
	}
	d := one(t, objs, "Deployment")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("the Deployment has no containers: %v", d.Object)
	}
	if image := containers[0].(map[string]any)["image"]; image != "backpressure-operator:v0.2.0" {
		t.Errorf("the manager's image is %v, want backpressure-operator:v0.2.0 from HELM_ARGS", image)
	}
}

// The chart's default image tag, its appVersion, is the tag the images of
// its version are built and released with: v and the version, as
// make release and the docs write it (the chart said 0.1.0 where the image
// is v0.1.0).
func TestChartDefaultImageTagIsTheRelease(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, chartDir+"/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	d := one(t, decode(t, helmTemplate(t)), "Deployment")
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if want := "backpressure-operator:v" + chart.Version; len(containers) == 0 || containers[0].(map[string]any)["image"] != want {
		t.Errorf("the chart's default manager image is %v, want %s (appVersion %q)", containers, want, chart.AppVersion)
	}
}
