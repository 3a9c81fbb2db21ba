package manifests

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// installs are the ways to install the operator, rendered.
func installs(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	return map[string][]*unstructured.Unstructured{
		"kustomize config/default": decode(t, kustomize(t, "config/default")),
		"helm template":            decode(t, helmTemplate(t)),
	}
}

// deployment returns the manager's Deployment among objs.
func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(one(t, objs, "Deployment").Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// The manager runs as the restricted Pod Security Standard asks, with
// bounded resources, probes, and two replicas behind leader election.
func TestManagerDeploymentIsHardened(t *testing.T) {
	for name, objs := range installs(t) {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, objs)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
				t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
			}
			pod := d.Spec.Template.Spec
			if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext = %+v, want runAsNonRoot and seccomp RuntimeDefault", psc)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Fatal("the manager container has no securityContext")
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Error("allowPrivilegeEscalation is not false")
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Error("readOnlyRootFilesystem is not true")
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
				t.Errorf("capabilities = %+v, want drop [ALL]", sc.Capabilities)
			}
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[res]; !ok {
					t.Errorf("no %s request", res)
				}
				if _, ok := c.Resources.Limits[res]; !ok {
					t.Errorf("no %s limit", res)
				}
			}

			args := argMap(c.Args)
			if args["--leader-elect"] != "true" {
				t.Errorf("--leader-elect = %q, want true", args["--leader-elect"])
			}
			if v, ok := args["--metrics-secure"]; ok && v != "true" {
				t.Errorf("--metrics-secure = %q: metrics must be served over HTTPS with authn/authz", v)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if got, want := args["--metrics-bind-address"], ":"+strconv.Itoa(int(ports["https"])); got != want {
				t.Errorf("--metrics-bind-address = %q, want the https port %q", got, want)
			}
			if got, want := args["--health-probe-bind-address"], ":"+strconv.Itoa(int(ports["probes"])); got != want {
				t.Errorf("--health-probe-bind-address = %q, want the probes port %q", got, want)
			}
			for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "probes" {
					t.Errorf("probe %+v, want GET %s on the probes port", probe, want)
				}
			}

			svcPorts, _, _ := unstructured.NestedSlice(one(t, objs, "Service").Object, "spec", "ports")
			if len(svcPorts) != 1 || svcPorts[0].(map[string]any)["targetPort"] != "https" {
				t.Errorf("metrics Service ports = %v, want one targeting the https port", svcPorts)
			}
			if sa := pod.ServiceAccountName; sa != operatorServiceAccount {
				t.Errorf("serviceAccountName = %q, want %q", sa, operatorServiceAccount)
			}
		})
	}
}

// Every argument the Deployments pass is a flag the manager accepts: the
// manager, given them, gets as far as loading its kubeconfig.
func TestManagerAcceptsTheDeploymentArgs(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "manager")
	run(t, "go", "build", "-o", bin, "./cmd/manager")
	for name, objs := range installs(t) {
		t.Run(name, func(t *testing.T) {
			args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
			out, err := runErr(bin, append(slices.Clone(args), "--kubeconfig="+filepath.Join(t.TempDir(), "absent"))...)
			if err == nil {
				t.Fatalf("the manager started without a kubeconfig:\n%s", out)
			}
			if !strings.Contains(err.Error(), "load kubeconfig") {
				t.Errorf("the manager rejected the Deployment's arguments %q:\n%v", args, err)
			}
		})
	}
}

// Every object of every install path and sample applies to a real API
// server (--dry-run=server: admission, schema and CEL validation, no
// change), the monitoring objects included.
func TestManifestsApplyToTheAPIServer(t *testing.T) {
	_, kubectl := controlPlane(t)
	// The chart goes to a namespace of its own: the RBAC test installs
	// config/default for real, whose Deployment has other selector labels.
	const helmNamespace = "backpressure-helm"
	// reports is the shared sample's second namespace: a dry run does not
	// create the namespace its other objects go to.
	for _, ns := range []string{operatorNamespace, helmNamespace, "shop", "reports"} {
		ensureNamespace(t, ns)
	}
	renders := map[string][]byte{
		"kustomize config/default with config/prometheus": kustomizeWithMonitoring(t),
		"helm template, every option on": helmTemplateIn(t, helmNamespace, "metrics.certManager.enabled=true", "metrics.serviceMonitor.enabled=true",
			"prometheusRule.enabled=true", "grafanaDashboard.enabled=true"),
		"helm template, metrics off": helmTemplateIn(t, helmNamespace, "metrics.enabled=false", "replicas=1",
			"leaderElection.enabled=false"),
		"kustomize config/samples":                            kustomize(t, "config/samples"),
		"kustomize config/samples/app":                        kustomize(t, "config/samples/app"),
		"kustomize config/samples/app/ack":                    kustomize(t, "config/samples/app/ack"),
		"kustomize config/samples/shared":                     kustomize(t, "config/samples/shared"),
		"kustomize config/samples with its component reserve": kustomizeWithReserve(t),
	}
	for name, data := range renders {
		t.Run(name, func(t *testing.T) {
			objs := decode(t, data)
			if len(objs) == 0 {
				t.Fatal("rendered no objects")
			}
			// kubectl splits -f at commas, which subtest directories hold.
			dir, err := os.MkdirTemp("", "manifests-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			path := filepath.Join(dir, "objects.yaml")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, err := kubectl.Run("apply", "--dry-run=server", "-f", path)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s%s", err, out, stderr)
			}
			// One line per object: "<kind>/<name> created (server dry run)".
			if got := strings.Count(out, "(server dry run)"); got != len(objs) {
				t.Errorf("the API server accepted %d objects, want %d:\n%s", got, len(objs), out)
			}
		})
	}
}

// The pod spec snippets patch the sample Deployment into what the
// application needs: its ServiceAccount and downward-API environment for
// the API source, the ConfigMap volume for the file source.
func TestApplicationPodSpecPatches(t *testing.T) {
	_, kubectl := controlPlane(t)
	ensureNamespace(t, "shop")
	if out, stderr, err := kubectl.Run("apply", "-f", filepath.Join(repoRoot, "config/samples/apps_v1_deployment.yaml")); err != nil {
		t.Fatalf("apply the sample Deployment: %v\n%s%s", err, out, stderr)
	}
	patched := func(t *testing.T, patch string) corev1.PodSpec {
		t.Helper()
		out, stderr, err := kubectl.Run("-n", "shop", "patch", "deployment", "search-gateway", "--dry-run=server",
			"--patch-file", filepath.Join(repoRoot, patch), "-o", "yaml")
		if err != nil {
			t.Fatalf("kubectl patch: %v\n%s", err, stderr)
		}
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Spec
	}

	t.Run("deployment_patch.yaml", func(t *testing.T) {
		pod := patched(t, "config/samples/app/deployment_patch.yaml")
		if pod.ServiceAccountName != "search-gateway" {
			t.Errorf("serviceAccountName = %q, want search-gateway, the subject of the sample RoleBinding", pod.ServiceAccountName)
		}
		env := map[string]string{}
		for _, e := range pod.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		want := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
		if diff := cmp.Diff(want, env); diff != "" {
			t.Errorf("downward-API environment (-want +got):\n%s", diff)
		}
	})
	t.Run("mounted_volume_patch.yaml", func(t *testing.T) {
		pod := patched(t, "config/samples/app/mounted_volume_patch.yaml")
		var mount *corev1.VolumeMount
		for i, m := range pod.Containers[0].VolumeMounts {
			if m.MountPath == "/etc/backpressure" {
				mount = &pod.Containers[0].VolumeMounts[i]
			}
		}
		if mount == nil || mount.SubPath != "" || !mount.ReadOnly {
			t.Fatalf("volume mounts %+v, want /etc/backpressure read-only and without subPath", pod.Containers[0].VolumeMounts)
		}
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if i < 0 || pod.Volumes[i].ConfigMap == nil || pod.Volumes[i].ConfigMap.Name != "search-gateway-backpressure" {
			t.Errorf("volumes %+v, want the ConfigMap search-gateway-backpressure mounted", pod.Volumes)
		}
	})
}

var namespaces sync.Map

// ensureNamespace creates the namespace once.
func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	if _, done := namespaces.LoadOrStore(name, true); done {
		return
	}
	_, kubectl := controlPlane(t)
	if out, stderr, err := kubectl.Run("create", "namespace", name); err != nil {
		t.Fatalf("create namespace %s: %v\n%s%s", name, err, out, stderr)
	}
}

// argMap maps --flag=value arguments to their values.
func argMap(args []string) map[string]string {
	m := make(map[string]string, len(args))
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}
