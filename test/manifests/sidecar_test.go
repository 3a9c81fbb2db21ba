package manifests

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// The sidecar sample patches the sample Deployment into a pod whose calls
// to the sample quota's downstream go through backpressure-proxy, a native
// sidecar, and the API server accepts it; the chart's example is the same
// container.
func TestProxySidecarSample(t *testing.T) {
	_, kubectl := controlPlane(t)
	ensureNamespace(t, "shop")
	if out, stderr, err := kubectl.Run("apply", "-f", filepath.Join(repoRoot, "config/samples/apps_v1_deployment.yaml")); err != nil {
		t.Fatalf("apply the sample Deployment: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err := kubectl.Run("-n", "shop", "patch", "deployment", "search-gateway", "--dry-run=server",
		"--patch-file", filepath.Join(repoRoot, "config/samples/app/sidecar_patch.yaml"), "-o", "yaml")
	if err != nil {
		t.Fatalf("kubectl patch: %v\n%s", err, stderr)
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	var quota v1alpha1.DownstreamQuota
	if err := yaml.Unmarshal(readRepoFile(t, "config/samples/backpressure_v1alpha1_downstreamquota.yaml"), &quota); err != nil {
		t.Fatal(err)
	}

	i := slices.IndexFunc(pod.InitContainers, func(c corev1.Container) bool { return c.Name == "backpressure-proxy" })
	if i < 0 {
		t.Fatalf("no backpressure-proxy init container in %+v", pod.InitContainers)
	}
	proxy := pod.InitContainers[i]
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("the proxy's restartPolicy is %v, want Always (a native sidecar)", proxy.RestartPolicy)
	}
	if pod.ServiceAccountName != "search-gateway" {
		t.Errorf("serviceAccountName = %q, want search-gateway, the subject of the sample RoleBinding", pod.ServiceAccountName)
	}
	args := argMap(proxy.Args)
	route := map[string]string{}
	for field := range strings.SplitSeq(args["--route"], ",") {
		k, v, _ := strings.Cut(field, "=")
		route[k] = v
	}
	if route["gate"] != quota.Name || route["upstream"] != "https://"+quota.Spec.Downstream {
		t.Errorf("--route %q, want the gate %s and the upstream https://%s of the sample quota", args["--route"], quota.Name, quota.Spec.Downstream)
	}
	if args["--configmap"] != quota.Spec.WorkloadRef.Name+"-backpressure" {
		t.Errorf("--configmap %q, want the sample workload's ConfigMap", args["--configmap"])
	}
	if _, ok := args["--acknowledge"]; !ok {
		t.Errorf("the proxy does not acknowledge: %q", proxy.Args)
	}
	env := map[string]string{}
	for _, e := range proxy.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if diff := cmp.Diff(map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, env); diff != "" {
		t.Errorf("the proxy's downward-API environment (-want +got):\n%s", diff)
	}
	if p := proxy.StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("startupProbe %+v, want GET /readyz: the application must start after the proxy", p)
	}
	checkProbePort(t, "the patched sample", proxy)
	var sample appsv1.Deployment
	if err := yaml.Unmarshal(readRepoFile(t, "config/samples/apps_v1_deployment.yaml"), &sample); err != nil {
		t.Fatal(err)
	}
	for _, c := range sample.Spec.Template.Spec.InitContainers {
		checkProbePort(t, "config/samples/apps_v1_deployment.yaml", c)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want more than the proxy's 30s shutdown timeout", g)
	}
	app := pod.Containers[slices.IndexFunc(pod.Containers, func(c corev1.Container) bool { return c.Name == "gateway" })]
	if j := slices.IndexFunc(app.Env, func(e corev1.EnvVar) bool { return e.Name == "LOGISTICS_URL" }); j < 0 ||
		app.Env[j].Value != "http://"+route["listen"] {
		t.Errorf("the application's environment %+v does not point LOGISTICS_URL at the route %s", app.Env, route["listen"])
	}

	var example struct {
		InitContainers []corev1.Container `json:"initContainers"`
	}
	if err := yaml.UnmarshalStrict(readRepoFile(t, "charts/backpressure-operator/examples/proxy-sidecar-values.yaml"), &example); err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Spec struct {
			Template struct {
				Spec struct {
					InitContainers []corev1.Container `json:"initContainers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, "config/samples/app/sidecar_patch.yaml"), &patch); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(patch.Spec.Template.Spec.InitContainers, example.InitContainers); diff != "" {
		t.Errorf("the chart's example differs from the sample's sidecar (-sample +chart):\n%s", diff)
	}
}

// checkProbePort checks that the proxy container c is probed on its probe
// port (--probe-listen, :9091 by default), which serves /healthz and
// /readyz; the metrics port serves no probe.
func checkProbePort(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || ports[p.HTTPGet.Port.StrVal] != 9091 {
			t.Errorf("%s: %s probe %+v, want an HTTP GET on the proxy's probe port 9091 (ports %v)", where, name, p, ports)
		}
	}
}
