package reload_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// One kube-apiserver and etcd serve every test of the package that needs
// them; each test works in its own namespace.
var controlPlane testenv.Shared

func TestMain(m *testing.M) { controlPlane.Main(m) }

// testNamespace creates a fresh namespace, with the default service account
// that pod admission looks for, and returns an admin client and its name.
func testNamespace(t testing.TB) (kubernetes.Interface, string) {
	t.Helper()
	return controlPlane.Namespace(t, "reload")
}

// restrictedClient returns a client acting as service account sa, bound to
// a Role that allows get, list and watch on the one ConfigMap cmName.
func restrictedClient(t testing.TB, admin kubernetes.Interface, ns, sa, cmName string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-plan"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{cmName}, Verbs: []string{"get", "list", "watch"},
		}},
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-plan"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := controlPlane.Config(t)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// The counters of a source's metrics that the tests read.
const (
	reloadCounter = "backpressure_config_reloads_total"
	ackCounter    = "backpressure_config_acknowledgements_total"
)

// errorCount returns the value of the counter name{result="error"} that
// reg gathers, 0 when it has no such series.
func errorCount(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == reload.ResultError {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// envOf returns a getenv reading vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}
