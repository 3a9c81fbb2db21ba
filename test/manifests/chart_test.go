package manifests

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The chart passes helm lint, with its defaults and with every option on.
func TestChartLints(t *testing.T) {
	for _, set := range [][]string{
		nil,
		{"metrics.certManager.enabled=true", "metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"},
		{"metrics.certSecret=metrics-tls", "metrics.serviceMonitor.enabled=true"},
		{"metrics.secure=false", "metrics.serviceMonitor.enabled=true", "serviceAccount.create=false", "serviceAccount.name=existing"},
	} {
		args := []string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		tool(t, "helm", args...)
	}
}

// Two replicas without leader election would reconcile at once and publish
// conflicting plans; the chart refuses to render them.
func TestChartRefusesReplicasWithoutLeaderElection(t *testing.T) {
	out, err := runErr("go", toolArgs("helm", "template", releaseName, chartDir, "--kube-version", kubeVersion,
		"--set", "leaderElection.enabled=false")...)
	if err == nil {
		t.Fatalf("helm template rendered 2 replicas without leader election:\n%s", out)
	}
	if !strings.Contains(err.Error(), "replicas above 1 need leaderElection.enabled") {
		t.Errorf("helm template failed for another reason: %v", err)
	}
	helmTemplate(t, "leaderElection.enabled=false", "replicas=1")
}

// The chart's copies of generated and shared files are current: its CRDs
// are config/crd/bases, its manager role is config/rbac/role.yaml, its alerts
// and dashboard are config/prometheus's.
func TestChartCopiesAreCurrent(t *testing.T) {
	pairs := map[string]string{
		"config/rbac/role.yaml":            chartDir + "/files/manager-role.yaml",
		"config/prometheus/alerts.yaml":    chartDir + "/files/alerts.yaml",
		"config/prometheus/dashboard.json": chartDir + "/files/dashboard.json",
	}
	crds := repoFiles(t, "config/crd/bases")
	if got := repoFiles(t, chartDir+"/crds"); !slices.Equal(got, crds) {
		t.Errorf("%s/crds holds %v, want config/crd/bases's %v; run make chart-sync", chartDir, got, crds)
	}
	for _, f := range crds {
		pairs[filepath.Join("config/crd/bases", f)] = filepath.Join(chartDir, "crds", f)
	}
	for src, dst := range pairs {
		if !bytes.Equal(readRepoFile(t, src), readRepoFile(t, dst)) {
			t.Errorf("%s differs from %s; run make chart-sync", dst, src)
		}
	}
}

// The chart installs what config/default installs: the same CRDs, roles
// with the same rules bound to the manager's ServiceAccount, and the same
// manager Deployment and metrics Service. Names and labels differ by design.
func TestChartMatchesKustomize(t *testing.T) {
	k := decode(t, kustomize(t, "config/default"))
	h := decode(t, helmTemplate(t))

	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		m := map[string]int{}
		for _, o := range objs {
			if o.GetKind() != "Namespace" { // Helm installs into an existing or --create-namespace namespace.
				m[o.GetKind()]++
			}
		}
		return m
	}
	if diff := cmp.Diff(kinds(k), kinds(h)); diff != "" {
		t.Errorf("kinds of objects (-kustomize +helm):\n%s", diff)
	}

	t.Run("CRDs", func(t *testing.T) {
		specs := func(objs []*unstructured.Unstructured) map[string]any {
			m := map[string]any{}
			for _, o := range find(objs, "CustomResourceDefinition") {
				m[o.GetName()] = o.Object["spec"]
			}
			return m
		}
		if diff := cmp.Diff(specs(k), specs(h)); diff != "" {
			t.Errorf("CRD specs (-kustomize +helm):\n%s", diff)
		}
	})

	t.Run("RBAC", func(t *testing.T) {
		if diff := cmp.Diff(grants(t, k), grants(t, h)); diff != "" {
			t.Errorf("roles, their aggregation and their subjects (-kustomize +helm):\n%s", diff)
		}
	})

	t.Run("Deployment", func(t *testing.T) {
		kd, hd := deployment(t, k), deployment(t, h)
		if diff := cmp.Diff(kd.Spec.Replicas, hd.Spec.Replicas); diff != "" {
			t.Errorf("replicas (-kustomize +helm):\n%s", diff)
		}
		kp, hp := kd.Spec.Template.Spec, hd.Spec.Template.Spec
		// The image is set at install time; the pull policy is Helm's
		// convention; the anti-affinity selects each install's own labels.
		kc, hc := kp.Containers[0], hp.Containers[0]
		kc.Image, hc.Image, hc.ImagePullPolicy = "", "", ""
		if diff := cmp.Diff(kc, hc, quantities); diff != "" {
			t.Errorf("manager container (-kustomize +helm):\n%s", diff)
		}
		kp.Containers, hp.Containers = nil, nil
		kp.Affinity, hp.Affinity = nil, nil
		if diff := cmp.Diff(kp, hp); diff != "" {
			t.Errorf("pod spec (-kustomize +helm):\n%s", diff)
		}
	})

	t.Run("metrics Service", func(t *testing.T) {
		ports := func(objs []*unstructured.Unstructured) any {
			p, _, _ := unstructured.NestedSlice(one(t, objs, "Service").Object, "spec", "ports")
			return p
		}
		if diff := cmp.Diff(ports(k), ports(h)); diff != "" {
			t.Errorf("metrics Service ports (-kustomize +helm):\n%s", diff)
		}
	})
}

// quantities compares resource quantities by value, not by their cached
// string form.
var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

// grant is what one role gives, to whom, independent of object names.
type grant struct {
	Kind        string
	Namespaced  bool
	Rules       []rbacv1.PolicyRule
	Aggregation []string
	// Subjects are the ServiceAccounts bound to the role, by namespace and
	// whether they are the manager's.
	Subjects []string
}

// grants lists the roles among objs with what they grant, sorted.
func grants(t *testing.T, objs []*unstructured.Unstructured) []grant {
	t.Helper()
	manager := one(t, objs, "ServiceAccount")
	type key struct{ kind, namespace, name string }
	byRole := map[key]*grant{}
	var out []*grant
	for _, kind := range []string{"ClusterRole", "Role"} {
		for _, o := range find(objs, kind) {
			var role rbacv1.ClusterRole // a Role has the same rules
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatal(err)
			}
			g := &grant{Kind: kind, Namespaced: o.GetNamespace() != "", Rules: role.Rules}
			for _, l := range slices.Sorted(maps.Keys(o.GetLabels())) {
				if strings.HasPrefix(l, "rbac.authorization.k8s.io/aggregate-to-") {
					g.Aggregation = append(g.Aggregation, l)
				}
			}
			byRole[key{kind, o.GetNamespace(), o.GetName()}] = g
			out = append(out, g)
		}
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range find(objs, kind) {
			var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			ns := ""
			if b.RoleRef.Kind == "Role" {
				ns = o.GetNamespace()
			}
			g, ok := byRole[key{b.RoleRef.Kind, ns, b.RoleRef.Name}]
			if !ok {
				t.Fatalf("%s %s refers to %s %s, which the install does not hold", kind, o.GetName(), b.RoleRef.Kind, b.RoleRef.Name)
			}
			for _, s := range b.Subjects {
				who := s.Kind + " " + s.Namespace + "/" + s.Name
				if s.Kind == rbacv1.ServiceAccountKind && s.Name == manager.GetName() && s.Namespace == manager.GetNamespace() {
					who = "the manager's ServiceAccount"
				}
				g.Subjects = append(g.Subjects, kind+" to "+who)
			}
		}
	}
	sorted := make([]grant, len(out))
	for i, g := range out {
		sorted[i] = *g
	}
	slices.SortFunc(sorted, func(a, b grant) int {
		return strings.Compare(a.Kind+":"+ruleString(a.Rules), b.Kind+":"+ruleString(b.Rules))
	})
	return sorted
}

func ruleString(rules []rbacv1.PolicyRule) string {
	var b strings.Builder
	for _, r := range rules {
		b.WriteString(strings.Join(r.APIGroups, ",") + "/" + strings.Join(r.Resources, ",") + strings.Join(r.NonResourceURLs, ",") + ":" + strings.Join(r.Verbs, ",") + ";")
	}
	return b.String()
}
