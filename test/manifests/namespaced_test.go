package manifests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

const (
	// watchedNamespace is the namespace config/namespaced serves: the
	// samples'.
	watchedNamespace = "shop"
	// unwatchedNamespace holds a copy of the samples the namespaced manager
	// must leave alone.
	unwatchedNamespace = "elsewhere"
)

// namespacedInstalls are the namespaced installs, rendered: the kustomize
// overlay and the chart with watchNamespaces.
func namespacedInstalls(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	return map[string][]*unstructured.Unstructured{
		"kustomize config/namespaced":    decode(t, kustomize(t, "config/namespaced")),
		"helm template, watchNamespaces": decode(t, helmTemplate(t, "watchNamespaces={"+watchedNamespace+"}")),
	}
}

// watchNamespacesArg returns the manager's --watch-namespaces, split.
func watchNamespacesArg(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	v, ok := argMap(deployment(t, objs).Spec.Template.Spec.Containers[0].Args)["--watch-namespaces"]
	if !ok {
		t.Fatal("the manager has no --watch-namespaces argument")
	}
	return strings.Split(v, ",")
}

// A namespaced install binds the manager's role in the watched namespaces
// only, the ones --watch-namespaces names, and nowhere cluster-wide but for
// the reviews its metrics server sends; both installs grant the same.
func TestNamespacedInstallRendered(t *testing.T) {
	renders := namespacedInstalls(t)
	for name, objs := range renders {
		t.Run(name, func(t *testing.T) {
			manager := one(t, objs, "ServiceAccount")
			var boundIn []string
			for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
				for _, o := range find(objs, kind) {
					var b rbacv1.RoleBinding
					fromUnstructured(t, o, &b)
					if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
						return s.Kind == rbacv1.ServiceAccountKind && s.Name == manager.GetName() && s.Namespace == manager.GetNamespace()
					}) {
						continue
					}
					switch {
					case kind == "ClusterRoleBinding" && !strings.HasSuffix(b.RoleRef.Name, "metrics-auth-role") &&
						!strings.HasSuffix(b.RoleRef.Name, "cluster-scoped-role"):
						t.Errorf("ClusterRoleBinding %s binds %s to the manager cluster-wide", b.Name, b.RoleRef.Name)
					case kind == "RoleBinding" && strings.HasSuffix(b.RoleRef.Name, "manager-role"):
						boundIn = append(boundIn, b.Namespace)
					}
				}
			}
			slices.Sort(boundIn)
			if diff := cmp.Diff(watchNamespacesArg(t, objs), boundIn); diff != "" {
				t.Errorf("--watch-namespaces and the namespaces the manager's role is bound in (-flag +bindings):\n%s", diff)
			}
			for _, o := range find(objs, "ClusterRole") {
				if strings.HasSuffix(o.GetName(), "cluster-scoped-role") {
					// Only the cluster-scoped DownstreamContracts and the
					// namespaces' labels, read; a contract's status, written.
					var role rbacv1.ClusterRole
					fromUnstructured(t, o, &role)
					for _, r := range role.Rules {
						for _, res := range r.Resources {
							if !slices.Contains([]string{"downstreamcontracts", "downstreamcontracts/status", "namespaces",
								"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, res) {
								t.Errorf("%s grants %v on %s, want only contracts, namespaces and admission policies", o.GetName(), r.Verbs, res)
							}
						}
						for _, v := range r.Verbs {
							read := slices.Contains([]string{"get", "list", "watch"}, v)
							statusPatch := v == "patch" && slices.Equal(r.Resources, []string{"downstreamcontracts/status"})
							if !read && !statusPatch {
								t.Errorf("%s grants %s on %v, want reads, and patch on a contract's status only", o.GetName(), v, r.Resources)
							}
						}
					}
					continue
				}
				if !strings.HasSuffix(o.GetName(), "metrics-auth-role") {
					continue
				}
				var role rbacv1.ClusterRole
				fromUnstructured(t, o, &role)
				for _, r := range role.Rules {
					if !slices.Equal(r.Verbs, []string{"create"}) || len(r.Resources) != 1 ||
						(r.Resources[0] != "tokenreviews" && r.Resources[0] != "subjectaccessreviews") {
						t.Errorf("%s grants %v, want create on tokenreviews and subjectaccessreviews only", o.GetName(), r)
					}
				}
			}
		})
	}
	t.Run("the chart grants what the overlay grants", func(t *testing.T) {
		if diff := cmp.Diff(grants(t, renders["kustomize config/namespaced"]), grants(t, renders["helm template, watchNamespaces"])); diff != "" {
			t.Errorf("roles, their aggregation and their subjects (-kustomize +helm):\n%s", diff)
		}
	})
}

var managerBinary struct {
	once sync.Once
	path string
	err  error
}

// buildManager builds cmd/manager once per test binary.
func buildManager(t *testing.T) string {
	t.Helper()
	managerBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "manifests-manager-")
		if err != nil {
			managerBinary.err = err
			return
		}
		managerBinary.path = filepath.Join(dir, "manager")
		_, managerBinary.err = runErr("go", "build", "-o", managerBinary.path, "./cmd/manager")
	})
	if managerBinary.err != nil {
		t.Fatal(managerBinary.err)
	}
	return managerBinary.path
}

// The manager accepts the namespaced installs' arguments, and rejects a
// --watch-namespaces that names no valid namespace list.
func TestManagerAcceptsWatchNamespaces(t *testing.T) {
	bin := buildManager(t)
	absent := "--kubeconfig=" + filepath.Join(t.TempDir(), "absent")
	for name, objs := range namespacedInstalls(t) {
		t.Run(name, func(t *testing.T) {
			args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
			_, err := runErr(bin, append(slices.Clone(args), absent)...)
			if err == nil || !strings.Contains(err.Error(), "load kubeconfig") {
				t.Errorf("the manager rejected the Deployment's arguments %q: %v", args, err)
			}
		})
	}
	for _, v := range []string{"", "shop,", "shop,,web", "Shop", "shop,shop", "shop/web"} {
		_, err := runErr(bin, "--watch-namespaces="+v, absent)
		if err == nil || !strings.Contains(err.Error(), "-watch-namespaces") || strings.Contains(err.Error(), "load kubeconfig") {
			t.Errorf("--watch-namespaces=%q: got %v, want the flag rejected", v, err)
		}
	}
}

// The namespaced install, applied to an API server of its own (the shared
// one has config/default's cluster-wide binding): the manager, run with the
// overlay's arguments as its ServiceAccount, reconciles the sample quota in
// the watched namespace and leaves the same quota in another namespace
// alone, where its ServiceAccount can do nothing; leader election works in
// its own namespace, which it does not watch.
func TestNamespacedInstallReconciles(t *testing.T) {
	env, err := testenv.New()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := env.Start()
	if err != nil {
		t.Fatalf("start the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	dir := t.TempDir()
	kubectl, err := testenv.NewKubectl(env, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k8s, err := client.New(admin, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{operatorNamespace, watchedNamespace, unwatchedNamespace} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// The chart's namespaced install applies too (not for real: the overlay
	// is what the manager runs with below).
	if out, stderr, err := kubectl.Run("apply", "--dry-run=server", "-f", writeTemp(t, helmTemplate(t, "watchNamespaces={"+watchedNamespace+"}"))); err != nil {
		t.Fatalf("kubectl apply --dry-run=server the chart with watchNamespaces: %v\n%s%s", err, out, stderr)
	}
	install := kustomize(t, "config/namespaced")
	apply(t, kubectl, install)
	samples := kustomize(t, "config/samples")
	apply(t, kubectl, samples)
	apply(t, kubectl, inNamespace(t, samples, unwatchedNamespace))

	// The manager, as a process, with the install's arguments but its
	// servers off, as its ServiceAccount.
	kubeconfig := impersonatingKubeconfig(t, env.KubeConfig, dir, operatorUser)
	args := []string{"--kubeconfig=" + kubeconfig, "--leader-election-namespace=" + operatorNamespace}
	for _, a := range deployment(t, decode(t, install)).Spec.Template.Spec.Containers[0].Args {
		if !strings.HasPrefix(a, "--metrics-bind-address=") && !strings.HasPrefix(a, "--health-probe-bind-address=") {
			args = append(args, a)
		}
	}
	args = append(args, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, buildManager(t), args...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("manager output:\n%s", logs.String())
		}
	})

	t.Run("reconciles the sample quota in the watched namespace", func(t *testing.T) {
		q := &v1alpha1.DownstreamQuota{}
		waitFor(ctx, t, "the sample quota to be Ready", func() (bool, error) {
			if err := k8s.Get(ctx, types.NamespacedName{Namespace: watchedNamespace, Name: sampleQuota}, q); err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: watchedNamespace, Name: sampleConfigMap}, &cm); err != nil {
			t.Fatalf("the published ConfigMap: %v", err)
		}
		if _, err := plan.Parse([]byte(cm.Data[plan.KeyFor(sampleQuota)])); err != nil {
			t.Errorf("the published plan: %v", err)
		}
	})

	t.Run("leaves the unwatched namespace alone", func(t *testing.T) {
		// The watched quota is Ready, so the manager has synced and run;
		// give it a moment more to do what it should not.
		time.Sleep(2 * time.Second)
		var q v1alpha1.DownstreamQuota
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: unwatchedNamespace, Name: sampleQuota}, &q); err != nil {
			t.Fatal(err)
		}
		if len(q.Status.Conditions) != 0 || q.Status.ConfigMap != nil {
			t.Errorf("the manager reconciled a quota in %s: status %+v", unwatchedNamespace, q.Status)
		}
		err := k8s.Get(ctx, types.NamespacedName{Namespace: unwatchedNamespace, Name: sampleConfigMap}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s/%s: %v, want not found", unwatchedNamespace, sampleConfigMap, err)
		}
	})

	t.Run("its ServiceAccount can do nothing in the unwatched namespace", func(t *testing.T) {
		operator := kubernetes.NewForConfigOrDie(impersonate(admin, operatorUser))
		_, err := operator.CoreV1().ConfigMaps(unwatchedNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: sampleConfigMap, Labels: map[string]string{"app.kubernetes.io/managed-by": "backpressure-operator"}},
		}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("create a ConfigMap in %s as the manager: %v, want forbidden", unwatchedNamespace, err)
		}
		for _, c := range []canI{
			{true, "create configmaps -n " + watchedNamespace},
			{true, "watch downstreamquotas.backpressure.dev -n " + watchedNamespace},
			{true, "patch downstreamquotas.backpressure.dev --subresource=status -n " + watchedNamespace},
			{true, "list pods -n " + watchedNamespace},
			{true, "update leases.coordination.k8s.io -n " + operatorNamespace},
			{true, "create tokenreviews.authentication.k8s.io"},
			{true, "create subjectaccessreviews.authorization.k8s.io"},

			{false, "create configmaps -n " + unwatchedNamespace},
			{false, "get configmaps -n " + unwatchedNamespace},
			{false, "watch downstreamquotas.backpressure.dev -n " + unwatchedNamespace},
			{false, "list pods -n " + unwatchedNamespace},
			{false, "list deployments.apps -n " + unwatchedNamespace},
			{false, "list pods -A"},
			{false, "watch downstreamquotas.backpressure.dev -A"},
			{false, "list configmaps -A"},
		} {
			c.check(t, kubectl, operatorUser)
		}
	})
}

// writeTemp writes data to a file in a fresh temporary directory (kubectl
// splits -f at commas, which test names hold) and returns its path.
func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "manifests-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// inNamespace returns the rendered objects moved into namespace, without
// the Namespace objects among them, with the RoleBindings binding the
// ServiceAccounts that moved.
func inNamespace(t *testing.T, data []byte, namespace string) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, o := range decode(t, data) {
		if o.GetKind() == "Namespace" {
			continue
		}
		from := o.GetNamespace()
		o.SetNamespace(namespace)
		// A RoleBinding binds the ServiceAccounts that moved with it.
		if o.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if s, ok := s.(map[string]any); ok && s["kind"] == "ServiceAccount" && s["namespace"] == from {
					s["namespace"] = namespace
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, subjects, "subjects"); err != nil {
				t.Fatal(err)
			}
		}
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(y)
	}
	return out.Bytes()
}

// impersonatingKubeconfig writes a copy of kubeconfig in which every user
// acts as user, and returns its path.
func impersonatingKubeconfig(t *testing.T, kubeconfig []byte, dir, user string) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(dir, "impersonating-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
