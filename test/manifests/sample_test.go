package manifests

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The sample runs as it is on a cluster that has the sidecar's image: its
// pods call through backpressure-proxy, the same sidecar as
// config/samples/app/sidecar_patch.yaml's, acknowledging, as the
// ServiceAccount whose Role lets it read its ConfigMap and annotate its
// pod, and its application container names an image that exists
// (registry.k8s.io), not a made-up one. make deploy-sample sets the
// sidecar's image.
func TestSampleRuns(t *testing.T) {
	objs := decode(t, kustomize(t, "config/samples"))
	var d appsv1.Deployment
	fromUnstructured(t, one(t, objs, "Deployment"), &d)
	pod := d.Spec.Template.Spec

	var patch appsv1.Deployment
	if err := yaml.Unmarshal(readRepoFile(t, "config/samples/app/sidecar_patch.yaml"), &patch); err != nil {
		t.Fatal(err)
	}
	ignoreImage := cmpopts.IgnoreFields(corev1.Container{}, "Image", "ImagePullPolicy")
	if diff := cmp.Diff(patch.Spec.Template.Spec.InitContainers, pod.InitContainers, ignoreImage); diff != "" {
		t.Errorf("the sample's sidecar differs from sidecar_patch.yaml's (-patch +sample):\n%s", diff)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Image != "backpressure-proxy:latest" {
		t.Errorf("the sample's sidecar image is not backpressure-proxy:latest, the name make docker-build-proxy builds and make deploy-sample replaces: %+v", pod.InitContainers)
	}
	for _, c := range pod.Containers {
		if c.Image != "registry.k8s.io/pause:3.10.2" {
			t.Errorf("container %s runs %q: the sample's stand-in application is registry.k8s.io/pause:3.10.2, an image that exists", c.Name, c.Image)
		}
	}
	if pod.ServiceAccountName != "search-gateway" || pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= 30 {
		t.Errorf("serviceAccountName %q, terminationGracePeriodSeconds %v: want search-gateway, and more than the proxy's 30s shutdown",
			pod.ServiceAccountName, pod.TerminationGracePeriodSeconds)
	}

	// The Role config/samples includes, bound to that ServiceAccount.
	var role rbacv1.Role
	fromUnstructured(t, one(t, objs, "Role"), &role)
	var binding rbacv1.RoleBinding
	fromUnstructured(t, one(t, objs, "RoleBinding"), &binding)
	if one(t, objs, "ServiceAccount").GetName() != pod.ServiceAccountName ||
		binding.RoleRef.Name != role.Name || !slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
		return s.Kind == "ServiceAccount" && s.Name == pod.ServiceAccountName
	}) {
		t.Errorf("the RoleBinding %+v does not bind the Role %s to the pods' ServiceAccount %s", binding, role.Name, pod.ServiceAccountName)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"search-gateway-backpressure"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"patch"}},
	}
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("the sample Role's rules (-want +got):\n%s", diff)
	}

	// make deploy-sample applies it with the sidecar's image replaced.
	_, kubectl := controlPlane(t)
	cmd := exec.Command("make", "--no-print-directory", "deploy-sample",
		"PROXY_IMG=registry.example.com/platform/backpressure-proxy:v0.1.0",
		"KUBECTL="+kubectl.Path+" --kubeconfig "+kubectl.Kubeconfig)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deploy-sample: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(repoRoot, "_output", "deploy-sample")) })
	out, stderr, err := kubectl.Run("get", "deployment", "search-gateway", "-n", "shop", "-o", "yaml")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var applied appsv1.Deployment
	if err := yaml.Unmarshal([]byte(out), &applied); err != nil {
		t.Fatal(err)
	}
	if ic := applied.Spec.Template.Spec.InitContainers; len(ic) != 1 || ic[0].Image != "registry.example.com/platform/backpressure-proxy:v0.1.0" {
		t.Errorf("after make deploy-sample the sidecar's image is %+v, want registry.example.com/platform/backpressure-proxy:v0.1.0", ic)
	}
}
