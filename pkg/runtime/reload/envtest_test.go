package reload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// One kube-apiserver and etcd serve every test of the package that needs
// them; each test works in its own namespace.
var (
	envOnce sync.Once
	env     *envtest.Environment
	envCfg  *rest.Config
	envErr  error
	nsSeq   atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}
	os.Exit(code)
}

// apiServer returns an admin client config for the shared control plane,
// starting it on first use. Tests that need it fail, rather than skip, when
// it cannot run.
func apiServer(t testing.TB) *rest.Config {
	t.Helper()
	envOnce.Do(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			envErr = errors.New(`KUBEBUILDER_ASSETS is unset; these tests need a kube-apiserver and etcd: ` +
				`run them as KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go test ./pkg/runtime/reload/ ` +
				`(the script builds both once and prints their directory)`)
			return
		}
		env = &envtest.Environment{}
		envCfg, envErr = env.Start()
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return rest.CopyConfig(envCfg)
}

// testNamespace creates a fresh namespace, with the default service account
// that pod admission looks for, and returns an admin client and its name.
func testNamespace(t testing.TB) (kubernetes.Interface, string) {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(apiServer(t))
	ns := fmt.Sprintf("reload-%d", nsSeq.Add(1))
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return client, ns
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
	cfg := apiServer(t)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

func configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}
