package manifests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller"
)

const (
	// The user-info extras of a service account token bound to a pod, as
	// the API server's token authenticator sets them.
	extraPodName  = "authentication.kubernetes.io/pod-name"
	extraPodUID   = "authentication.kubernetes.io/pod-uid"
	extraNodeName = "authentication.kubernetes.io/node-name"
	// restrictPodWrites is the namespace label that opts a namespace out of
	// the pod-writes policy, with the value "false".
	restrictPodWrites = "backpressure.dev/restrict-pod-writes"
)

// podIdentity returns cfg acting as service account sa of namespace ns with
// a token bound to pod (name and uid), the way a pod's projected token
// authenticates; an empty pod name is a token bound to no pod.
func podIdentity(cfg *rest.Config, ns, sa, pod string, uid types.UID) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + sa,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	if pod != "" {
		c.Impersonate.Extra = map[string][]string{
			extraPodName:  {pod},
			extraPodUID:   {string(uid)},
			extraNodeName: {"node-1"},
		}
	}
	return c
}

// denied fails the test unless err is a Forbidden that names rule.
func denied(t *testing.T, err error, rule string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("allowed, want denied by rule %s", rule)
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("got %v, want a denial by rule %s", err, rule)
	case !strings.Contains(err.Error(), "rule "+rule+":"):
		t.Errorf("denied for another reason than rule %s: %v", rule, err)
	default:
		t.Log(err)
	}
}

// allowed fails the test when err is not nil.
func allowed(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("denied, want allowed: %v", err)
	}
}

// mergePatch is a JSON merge patch.
func mergePatch(s string) []byte { return []byte(s) }

// waitForPolicy waits until the API server enforces a policy: until probe,
// a request the policy denies sent with dryRun, is denied. The API server
// loads policies, bindings and namespace labels through informers, so a
// fresh one takes effect a moment after it is created.
func waitForPolicy(ctx context.Context, t *testing.T, what string, probe func(metav1.PatchOptions) error) {
	t.Helper()
	waitFor(ctx, t, what+" to be enforced", func() (bool, error) {
		err := probe(metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return false, nil
		}
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	})
}

// planDocument returns the document the operator publishes for gate, with
// a share of its own for each of pods pods, as Marshal encodes it.
func planDocument(t *testing.T, gate string, pods int) string {
	t.Helper()
	d := plan.Document{Version: plan.CurrentVersion, Gate: gate, Downstream: gate + ".example.com", Epoch: "0f1e-uid",
		Revision: 1, Permits: 5, QueueCapacity: 9, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1,
		LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5}
	if pods > 0 {
		d.Pods = make(map[string]plan.PodShare, pods)
		for i := range pods {
			d.Pods[fmt.Sprintf("%s-gateway-7d9f8b6c5d-%06d", gate, i)] = plan.PodShare{Permits: 6, QueueCapacity: 10, Workers: 6}
		}
	}
	d.Hash = plan.Hash(d)
	data, err := plan.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The operator's service account can write only the ConfigMaps it
// publishes plans in, and only plans; nobody else is affected. Each
// forbidden ConfigMap below breaks exactly one rule, and the denial names
// it. Impersonated against the API server with config/default installed.
func TestOperatorConfigMapPolicy(t *testing.T) {
	admin, kubectl := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ensureNamespace(t, operatorNamespace)
	apply(t, kubectl, kustomize(t, "config/default"))
	cs := kubernetes.NewForConfigOrDie(admin)

	const ns = "policy-operator"
	ensureNamespace(t, ns)
	operator := kubernetes.NewForConfigOrDie(impersonate(admin, operatorUser)).CoreV1()
	labelled := func(namespace, name string, labels map[string]string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}, Data: data}
	}
	ours := func(workload string, extra ...string) map[string]string {
		l := map[string]string{controller.ManagedByLabel: controller.ManagedByValue, v1alpha1.WorkloadLabel: workload}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	gate := map[string]string{"payments.json": planDocument(t, "payments", 0)}
	waitForPolicy(ctx, t, "the operator's ConfigMap policy", func(o metav1.PatchOptions) error {
		_, err := operator.ConfigMaps(ns).Create(ctx, labelled(ns, "probe", nil, nil), metav1.CreateOptions{DryRun: o.DryRun})
		return err
	})

	// Someone else's ConfigMaps, created by the admin: the policy does not
	// judge other users.
	foreign, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-settings", Namespace: "kube-system"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, labelled(ns, "app-settings", map[string]string{"app": "shop"}, map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the operator writes: it claims the name with an empty ConfigMap,
	// then applies each quota's gate.
	t.Run("claims its ConfigMap", func(t *testing.T) {
		_, err := operator.ConfigMaps(ns).Create(ctx, labelled(ns, "api-backpressure", ours("api"), nil), metav1.CreateOptions{})
		allowed(t, err)
	})
	t.Run("applies a gate to its ConfigMap, labels kept", func(t *testing.T) {
		_, err := operator.ConfigMaps(ns).Patch(ctx, "api-backpressure", types.MergePatchType,
			mergePatch(`{"data":{"payments.json":`+strconv.Quote(gate["payments.json"])+`}}`), metav1.PatchOptions{})
		allowed(t, err)
	})
	t.Run("applies a large gate", func(t *testing.T) {
		// About 600 kB of per-pod shares: the document check looks at the
		// beginning and the end only, so its cost does not grow with them.
		apply := corev1ac.ConfigMap("api-backpressure", ns).WithLabels(ours("api")).
			WithData(map[string]string{"search.json": planDocument(t, "search", 5000)})
		_, err := operator.ConfigMaps(ns).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "backpressure-operator/search", Force: true})
		allowed(t, err)
	})
	t.Run("creates the ConfigMap spec.configMapName names", func(t *testing.T) {
		_, err := operator.ConfigMaps(ns).Create(ctx, labelled(ns, "api-canary-backpressure", ours("api"), gate), metav1.CreateOptions{})
		allowed(t, err)
	})

	// Creations that break one rule each.
	for _, c := range []struct {
		name, rule string
		cm         *corev1.ConfigMap
		binary     map[string][]byte
	}{
		{"an unlabelled ConfigMap", "create-labelled-only", labelled(ns, "unlabelled", nil, nil), nil},
		{"a ConfigMap labelled for another manager", "create-labelled-only",
			labelled(ns, "helm-owned", map[string]string{controller.ManagedByLabel: "Helm"}, nil), nil},
		{"kube-system/aws-auth", "no-system-namespace", labelled("kube-system", "aws-auth", ours("aws"), nil), nil},
		{"a ConfigMap in kube-public", "no-system-namespace", labelled("kube-public", "api-backpressure", ours("api"), gate), nil},
		{"a ConfigMap without a workload", "workload-label",
			labelled(ns, "api-backpressure", map[string]string{controller.ManagedByLabel: controller.ManagedByValue}, nil), nil},
		{"coredns-custom", "name", labelled(ns, "coredns-custom", ours("coredns"), nil), nil},
		{"another workload's name", "name", labelled(ns, "web-backpressure", ours("api"), nil), nil},
		{"a Grafana dashboard", "labels-allowed",
			labelled(ns, "grafana-backpressure", ours("grafana", "grafana_dashboard", "1"), gate), nil},
		{"binaryData", "no-binary-data", labelled(ns, "bin-backpressure", ours("bin"), nil), map[string][]byte{"payments.json": []byte("{}")}},
		{"a Corefile", "plan-keys-only", labelled(ns, "dns-backpressure", ours("dns"), map[string]string{"Corefile": ".:53 { forward . 10.0.0.1 }"}), nil},
		{"a key that is no gate name", "plan-keys-only", labelled(ns, "x-backpressure", ours("x"), map[string]string{"Payments.json": gate["payments.json"]}), nil},
		{"text under a plan key", "plan-documents-only", labelled(ns, "y-backpressure", ours("y"), map[string]string{"payments.json": "not a plan"}), nil},
		{"JSON that is no plan", "plan-documents-only", labelled(ns, "z-backpressure", ours("z"), map[string]string{"payments.json": `{"apiVersion":"v1"}`}), nil},
		{"another gate's plan under a key", "plan-documents-only",
			labelled(ns, "w-backpressure", ours("w"), map[string]string{"search.json": gate["payments.json"]}), nil},
		{"a plan cut short", "plan-documents-only",
			labelled(ns, "v-backpressure", ours("v"), map[string]string{"payments.json": gate["payments.json"][:40]}), nil},
	} {
		t.Run("may not create "+c.name, func(t *testing.T) {
			c.cm.BinaryData = c.binary
			_, err := operator.ConfigMaps(c.cm.Namespace).Create(ctx, c.cm, metav1.CreateOptions{})
			denied(t, err, c.rule)
		})
	}

	t.Run("may not edit a foreign ConfigMap in kube-system", func(t *testing.T) {
		_, err := operator.ConfigMaps("kube-system").Patch(ctx, foreign.Name, types.MergePatchType,
			mergePatch(`{"data":{"k":"stolen"}}`), metav1.PatchOptions{})
		denied(t, err, "change-own-only")
	})
	t.Run("may not adopt a foreign ConfigMap by labelling it", func(t *testing.T) {
		_, err := operator.ConfigMaps("kube-system").Patch(ctx, foreign.Name, types.MergePatchType,
			mergePatch(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"backpressure-operator"}}}`), metav1.PatchOptions{})
		denied(t, err, "change-own-only")
	})
	t.Run("may not delete a foreign ConfigMap", func(t *testing.T) {
		err := operator.ConfigMaps(ns).Delete(ctx, "app-settings", metav1.DeleteOptions{})
		denied(t, err, "change-own-only")
	})
	for name, c := range map[string]struct{ patch, rule string }{
		"remove the managed-by label": {`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`, "no-relabel"},
		"change the managed-by label": {`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"someone"}}}`, "no-relabel"},
		"change the workload label":   {`{"metadata":{"labels":{"backpressure.dev/workload":"other"}}}`, "no-relabel"},
		"remove the workload label":   {`{"metadata":{"labels":{"backpressure.dev/workload":null}}}`, "no-relabel"},
		"add a label Grafana selects": {`{"metadata":{"labels":{"grafana_dashboard":"1"}}}`, "labels-allowed"},
		"add binaryData":              {`{"binaryData":{"blob":"e30="}}`, "no-binary-data"},
		"add a key that is no plan":   {`{"data":{"Corefile":".:53"}}`, "plan-keys-only"},
		"replace a plan with no plan": {`{"data":{"payments.json":"{}"}}`, "plan-documents-only"},
		"add another gate's plan":     {`{"data":{"other.json":` + strconv.Quote(gate["payments.json"]) + `}}`, "plan-documents-only"},
	} {
		t.Run("may not "+name+" of its own ConfigMap", func(t *testing.T) {
			_, err := operator.ConfigMaps(ns).Patch(ctx, "api-backpressure", types.MergePatchType, mergePatch(c.patch), metav1.PatchOptions{})
			denied(t, err, c.rule)
		})
	}
	t.Run("removes its gate beside a key someone added by hand", func(t *testing.T) {
		// What the request does not touch is not judged: the operator can
		// still take its gates out of a ConfigMap someone edited.
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "api-backpressure", types.MergePatchType,
			mergePatch(`{"metadata":{"labels":{"team":"shop"}},"data":{"notes":"hand-written"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := operator.ConfigMaps(ns).Patch(ctx, "api-backpressure", types.MergePatchType,
			mergePatch(`{"data":{"payments.json":null}}`), metav1.PatchOptions{})
		allowed(t, err)
	})
	t.Run("deletes its own ConfigMap", func(t *testing.T) {
		allowed(t, operator.ConfigMaps(ns).Delete(ctx, "api-backpressure", metav1.DeleteOptions{}))
	})
	t.Run("others are not judged", func(t *testing.T) {
		_, err := cs.CoreV1().ConfigMaps("kube-system").Patch(ctx, foreign.Name, types.MergePatchType,
			mergePatch(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"backpressure-operator"}}}`), metav1.PatchOptions{})
		allowed(t, err)
		allowed(t, cs.CoreV1().ConfigMaps(ns).Delete(ctx, "app-settings", metav1.DeleteOptions{}))
	})
}

// A service account of a namespace can write pods only with a token bound
// to a pod, and then change only its own pod and on it only the
// applied.backpressure.dev/* annotations; in every namespace but
// Kubernetes' own, unless the namespace opts out. Kubelets, people and
// controllers of other namespaces are not judged. Impersonated, with the
// user-info extras a bound token carries, against the API server with
// config/default installed.
func TestPodWritesPolicy(t *testing.T) {
	admin, kubectl := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ensureNamespace(t, operatorNamespace)
	apply(t, kubectl, kustomize(t, "config/default"))
	cs := kubernetes.NewForConfigOrDie(admin)

	// ns carries no label at all: the policy applies by default.
	const ns, open, sa = "policy-pods", "policy-pods-open", "search-gateway"
	for name, labels := range map[string]map[string]string{ns: nil, open: {restrictPodWrites: "false"}} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// RBAC lets everyone below write to pods, as the ack Role does and more,
	// so that what is denied is the policy's doing.
	for _, n := range []string{ns, open, "kube-system"} {
		grantPodWrites(ctx, t, cs, n, []rbacv1.Subject{
			{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts"},
			{Kind: rbacv1.UserKind, Name: "system:node:node-1"},
		})
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct{ ns, name string }{{ns, "gateway-a"}, {ns, "gateway-b"}, {open, "gateway-a"}, {"kube-system", "policy-gateway"}} {
		pod, err := cs.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": "gateway"},
				Annotations: map[string]string{"owner": "shop-team"}},
			Spec: corev1.PodSpec{ServiceAccountName: sa,
				Containers: []corev1.Container{{Name: "gateway", Image: "registry.example.com/gateway:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[p.ns+"/"+p.name] = pod
	}
	own := pods[ns+"/gateway-a"]
	app := kubernetes.NewForConfigOrDie(podIdentity(admin, ns, sa, own.Name, own.UID)).CoreV1().Pods(ns)
	patch := func(pods interface {
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*corev1.Pod, error)
	}, name, body string, subresources ...string) error {
		_, err := pods.Patch(ctx, name, types.MergePatchType, mergePatch(body), metav1.PatchOptions{}, subresources...)
		return err
	}
	waitForPolicy(ctx, t, "the pod-writes policy", func(o metav1.PatchOptions) error {
		_, err := app.Patch(ctx, own.Name, types.MergePatchType, mergePatch(`{"metadata":{"labels":{"probe":"x"}}}`), o)
		return err
	})

	t.Run("acknowledges on its own pod", func(t *testing.T) {
		allowed(t, patch(app, own.Name, `{"metadata":{"annotations":{"applied.backpressure.dev/x":"0f1e-uid/1"}}}`))
		allowed(t, patch(app, own.Name, `{"metadata":{"annotations":{"applied.backpressure.dev/x":"0f1e-uid/2","applied.backpressure.dev/y":"0f1e-uid/released"}}}`))
		allowed(t, patch(app, own.Name, `{"metadata":{"annotations":{"applied.backpressure.dev/y":null}}}`))
		got, err := cs.CoreV1().Pods(ns).Get(ctx, own.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"owner": "shop-team", "applied.backpressure.dev/x": "0f1e-uid/2"}
		if diff := cmp.Diff(want, got.Annotations); diff != "" {
			t.Errorf("annotations of the pod (-want +got):\n%s", diff)
		}
	})
	t.Run("may not annotate another pod", func(t *testing.T) {
		denied(t, patch(app, "gateway-b", `{"metadata":{"annotations":{"applied.backpressure.dev/x":"0f1e-uid/1"}}}`), "own-pod-only")
	})
	t.Run("may not label its own pod", func(t *testing.T) {
		denied(t, patch(app, own.Name, `{"metadata":{"labels":{"app":"other"}}}`), "no-labels")
		denied(t, patch(app, own.Name, `{"metadata":{"labels":{"extra":"x"}}}`), "no-labels")
		denied(t, patch(app, own.Name, `{"metadata":{"labels":{"app":null}}}`), "no-labels")
	})
	t.Run("may not change its own pod's image", func(t *testing.T) {
		err := patch(app, own.Name, `{"spec":{"containers":[{"name":"gateway","image":"registry.example.com/evil:1"}]}}`)
		denied(t, err, "no-spec")
	})
	t.Run("may not set another annotation on its own pod", func(t *testing.T) {
		denied(t, patch(app, own.Name, `{"metadata":{"annotations":{"prometheus.io/scrape":"false"}}}`), "acknowledgements-only")
		denied(t, patch(app, own.Name, `{"metadata":{"annotations":{"owner":"someone"}}}`), "acknowledgements-only")
		denied(t, patch(app, own.Name, `{"metadata":{"annotations":{"owner":null}}}`), "acknowledgements-only")
		// A key that only looks like an acknowledgement.
		denied(t, patch(app, own.Name, `{"metadata":{"annotations":{"backpressure.dev/x":"1"}}}`), "acknowledgements-only")
	})
	t.Run("may not change its own pod's status or finalizers", func(t *testing.T) {
		denied(t, patch(app, own.Name, `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, "status"), "nothing-else")
		denied(t, patch(app, own.Name, `{"metadata":{"finalizers":["example.com/keep"]}}`), "nothing-else")
	})
	t.Run("may not delete pods", func(t *testing.T) {
		denied(t, app.Delete(ctx, "gateway-b", metav1.DeleteOptions{}), "no-delete")
		denied(t, app.Delete(ctx, own.Name, metav1.DeleteOptions{}), "no-delete")
	})
	t.Run("a token of an earlier pod of the same name may not", func(t *testing.T) {
		stale := kubernetes.NewForConfigOrDie(podIdentity(admin, ns, sa, own.Name, "8b2c6e1e-0000-4000-8000-000000000000")).CoreV1().Pods(ns)
		denied(t, patch(stale, own.Name, `{"metadata":{"annotations":{"applied.backpressure.dev/x":"0f1e-uid/3"}}}`), "own-pod-only")
	})
	t.Run("the same service account with a token bound to no pod may not write pods", func(t *testing.T) {
		// A legacy Secret token or a TokenRequest without a bound object:
		// no pod-name extra, whatever else it carries.
		unbound := kubernetes.NewForConfigOrDie(podIdentity(admin, ns, sa, "", "")).CoreV1().Pods(ns)
		denied(t, patch(unbound, "gateway-b", `{"metadata":{"labels":{"checked":"true"}}}`), "pod-bound-token-only")
		denied(t, patch(unbound, own.Name, `{"metadata":{"annotations":{"applied.backpressure.dev/x":"0f1e-uid/9"}}}`), "pod-bound-token-only")
		denied(t, unbound.Delete(ctx, "gateway-b", metav1.DeleteOptions{}), "pod-bound-token-only")
		nodeBound := podIdentity(admin, ns, sa, "", "")
		nodeBound.Impersonate.Extra = map[string][]string{extraNodeName: {"node-1"}}
		c := kubernetes.NewForConfigOrDie(nodeBound).CoreV1().Pods(ns)
		denied(t, patch(c, "gateway-b", `{"metadata":{"labels":{"checked":"true"}}}`), "pod-bound-token-only")
	})

	// Not judged.
	label := `{"metadata":{"labels":{"checked":"true"}}}`
	t.Run("a pod in a namespace that opted out", func(t *testing.T) {
		p := pods[open+"/gateway-a"]
		c := kubernetes.NewForConfigOrDie(podIdentity(admin, open, sa, p.Name, p.UID)).CoreV1().Pods(open)
		allowed(t, patch(c, p.Name, label))
		unbound := kubernetes.NewForConfigOrDie(podIdentity(admin, open, sa, "", "")).CoreV1().Pods(open)
		allowed(t, patch(unbound, p.Name, label))
	})
	t.Run("kube-system's own service accounts", func(t *testing.T) {
		// The controller manager's controllers use tokens bound to no pod.
		c := kubernetes.NewForConfigOrDie(podIdentity(admin, "kube-system", "replicaset-controller", "", "")).CoreV1().Pods("kube-system")
		allowed(t, patch(c, "policy-gateway", label))
	})
	t.Run("a controller's pod in another namespace", func(t *testing.T) {
		c := kubernetes.NewForConfigOrDie(podIdentity(admin, "mesh-system", "injector", "injector-5d8f", "5d8f0000-0000-4000-8000-000000000000")).CoreV1().Pods(ns)
		allowed(t, patch(c, "gateway-b", `{"metadata":{"labels":{"mesh":"on"},"annotations":{"mesh.example.com/status":"injected"}}}`))
	})
	t.Run("a kubelet", func(t *testing.T) {
		kubelet := rest.CopyConfig(admin)
		kubelet.Impersonate = rest.ImpersonationConfig{UserName: "system:node:node-1", Groups: []string{"system:nodes", "system:authenticated"}}
		c := kubernetes.NewForConfigOrDie(kubelet).CoreV1().Pods(ns)
		allowed(t, patch(c, own.Name, `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, "status"))
	})
	t.Run("a person", func(t *testing.T) {
		allowed(t, patch(cs.CoreV1().Pods(ns), own.Name, label))
		allowed(t, cs.CoreV1().Pods(ns).Delete(ctx, "gateway-b", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	})
}

// grantPodWrites lets subjects update, patch and delete the pods of ns and
// their status.
func grantPodWrites(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, subjects []rbacv1.Subject) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-writer", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"},
			Verbs: []string{"get", "update", "patch", "delete"}}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-writer", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   subjects,
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Both installs ship both policies, bound, with the same rules; the
// operator's names the ServiceAccount the install runs the manager as; the
// chart's values turn them off.
func TestPoliciesRendered(t *testing.T) {
	policies := func(t *testing.T, objs []*unstructured.Unstructured) map[string]admissionregistrationv1.ValidatingAdmissionPolicySpec {
		t.Helper()
		out := map[string]admissionregistrationv1.ValidatingAdmissionPolicySpec{}
		bound := map[string]bool{}
		for _, o := range find(objs, "ValidatingAdmissionPolicyBinding") {
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			fromUnstructured(t, o, &b)
			if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
				t.Errorf("binding %s has validation actions %v, want [Deny]", b.Name, b.Spec.ValidationActions)
			}
			bound[b.Spec.PolicyName] = true
		}
		for _, o := range find(objs, "ValidatingAdmissionPolicy") {
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			fromUnstructured(t, o, &p)
			if p.Namespace != "" {
				t.Errorf("policy %s has namespace %q; policies are cluster-scoped", p.Name, p.Namespace)
			}
			if !bound[p.Name] {
				t.Errorf("policy %s has no binding", p.Name)
			}
			// Keyed by what the policy governs, not by its install's name.
			out[p.Spec.MatchConstraints.ResourceRules[0].Resources[0]] = p.Spec
		}
		return out
	}
	// username is the identity the operator's policy matches.
	username := func(t *testing.T, spec admissionregistrationv1.ValidatingAdmissionPolicySpec) string {
		t.Helper()
		if len(spec.MatchConditions) != 1 {
			t.Fatalf("the operator's policy has match conditions %v, want one", spec.MatchConditions)
		}
		return policyUsername(t, spec.MatchConditions[0].Expression)
	}
	saUser := func(t *testing.T, objs []*unstructured.Unstructured) string {
		sa := one(t, objs, "ServiceAccount")
		return "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
	}

	k := decode(t, kustomize(t, "config/default"))
	kp := policies(t, k)
	if len(kp) != 2 || kp["configmaps"].Validations == nil || kp["pods"].Validations == nil {
		t.Fatalf("config/default holds policies for %v, want configmaps and pods", kp)
	}
	if got, want := username(t, kp["configmaps"]), saUser(t, k); got != want {
		t.Errorf("config/default's operator policy matches %s, want its manager's ServiceAccount %s", got, want)
	}
	if got := username(t, kp["configmaps"]); got != operatorUser {
		t.Errorf("config/default's operator policy matches %s, want %s", got, operatorUser)
	}

	t.Run("the chart's are config/policies's", func(t *testing.T) {
		hp := policies(t, decode(t, helmTemplate(t)))
		if diff := cmp.Diff(kp, hp); diff != "" {
			t.Errorf("policy specs (-kustomize +helm):\n%s", diff)
		}
	})
	t.Run("the chart's names its release's ServiceAccount", func(t *testing.T) {
		for _, set := range [][]string{nil, {"serviceAccount.name=manager"}, {"serviceAccount.create=false", "serviceAccount.name=existing"}} {
			objs := decode(t, helmTemplateIn(t, "ops", set...))
			want := "system:serviceaccount:ops:" + deployment(t, objs).Spec.Template.Spec.ServiceAccountName
			if got := username(t, policies(t, objs)["configmaps"]); got != want {
				t.Errorf("with %v the operator's policy matches %s, want %s", set, got, want)
			}
		}
	})
	t.Run("the chart's values turn them off, and the manager's check of them", func(t *testing.T) {
		checked := func(objs []*unstructured.Unstructured) string {
			v, ok := argMap(deployment(t, objs).Spec.Template.Spec.Containers[0].Args)["--admission-policies"]
			if !ok {
				return "operator-configmaps,pod-writes" // the manager's default
			}
			return v
		}
		if got := checked(k); got != "operator-configmaps,pod-writes" {
			t.Errorf("config/default's manager checks %q, want both policies", got)
		}
		objs := decode(t, helmTemplate(t, "admissionPolicies.podWrites.enabled=false"))
		if p := policies(t, objs); len(p) != 1 || p["configmaps"].Validations == nil {
			t.Errorf("podWrites.enabled=false leaves policies for %v, want configmaps only", p)
		}
		if got := checked(objs); got != "operator-configmaps" {
			t.Errorf("podWrites.enabled=false: the manager checks %q, want operator-configmaps", got)
		}
		objs = decode(t, helmTemplate(t, "admissionPolicies.enabled=false"))
		if n := len(find(objs, "ValidatingAdmissionPolicy")) + len(find(objs, "ValidatingAdmissionPolicyBinding")); n != 0 {
			t.Errorf("admissionPolicies.enabled=false renders %d policies and bindings, want none", n)
		}
		if got := checked(objs); got != "" {
			t.Errorf("admissionPolicies.enabled=false: the manager checks %q, want none", got)
		}
	})
	t.Run("the pod-writes policy applies everywhere but where a namespace opts out", func(t *testing.T) {
		want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: restrictPodWrites, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}},
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "kube-public", "kube-node-lease"}},
		}}
		for name, objs := range map[string][]*unstructured.Unstructured{"kustomize": k, "helm": decode(t, helmTemplate(t))} {
			b := podWritesBinding(t, objs)
			if diff := cmp.Diff(want, b.Spec.MatchResources.NamespaceSelector); diff != "" {
				t.Errorf("%s: namespace selector of the pod-writes binding (-want +got):\n%s", name, diff)
			}
		}
	})
	t.Run("the chart's namespace selector is a value", func(t *testing.T) {
		b := podWritesBinding(t, decode(t, helmTemplate(t, "admissionPolicies.podWrites.namespaceSelector.matchLabels.tier=apps")))
		if diff := cmp.Diff(map[string]string{"tier": "apps"}, b.Spec.MatchResources.NamespaceSelector.MatchLabels); diff != "" {
			t.Errorf("namespace selector (-want +got):\n%s", diff)
		}
	})
}

// podWritesBinding returns the binding of the pod-writes policy among objs.
func podWritesBinding(t *testing.T, objs []*unstructured.Unstructured) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	t.Helper()
	for _, o := range find(objs, "ValidatingAdmissionPolicyBinding") {
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		fromUnstructured(t, o, &b)
		if strings.HasSuffix(b.Spec.PolicyName, "pod-writes") {
			return &b
		}
	}
	t.Fatal("no binding of the pod-writes policy")
	return nil
}

// policyUsername reads the user the operator's policy matches out of its
// match condition, request.userInfo.username == 'system:serviceaccount:' +
// '<namespace>' + ':' + '<name>'.
func policyUsername(t *testing.T, expr string) string {
	t.Helper()
	parts := strings.Split(expr, "'")
	if len(parts) != 9 || strings.TrimSpace(parts[0]) != "request.userInfo.username ==" || parts[1] != "system:serviceaccount:" ||
		parts[5] != ":" || parts[8] != "" {
		t.Fatalf("the operator's policy matches %q, want request.userInfo.username == 'system:serviceaccount:' + '<namespace>' + ':' + '<name>'", expr)
	}
	return parts[1] + parts[3] + parts[5] + parts[7]
}

// fromUnstructured converts o into out, failing the test when it cannot.
func fromUnstructured(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
