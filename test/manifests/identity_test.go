package manifests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// copyConfig copies config/ into a temporary directory and returns the
// copy's path, for a test to edit as a user would.
func copyConfig(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot, "config"))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// editFile replaces old, which must occur once, with new in path.
func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(data, []byte(old)) != 1 {
		t.Fatalf("%s no longer holds %q once", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

// operatorPolicyUser returns the user the operator's ConfigMap policy among
// objs matches.
func operatorPolicyUser(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	for _, o := range find(objs, "ValidatingAdmissionPolicy") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		fromUnstructured(t, o, &p)
		if p.Spec.MatchConstraints.ResourceRules[0].Resources[0] == "configmaps" {
			return policyUsername(t, p.Spec.MatchConditions[0].Expression)
		}
	}
	t.Fatal("no policy on configmaps")
	return ""
}

// serviceAccountUser returns the username of the install's ServiceAccount.
func serviceAccountUser(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	sa := one(t, objs, "ServiceAccount")
	return "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()
}

// An install rendered under another namespace and name prefix still holds
// its manager to the operator's policy: the policy names the install's own
// ServiceAccount, whether config/default itself is edited (applied to the
// API server for real, and the manager's identity denied there) or an
// overlay renames it again and lists the replacements, as
// config/default/operator_identity.yaml says. Without the replacements the
// overlay's policy would judge nobody; the manager's own check reports that
// (internal/policycheck).
func TestInstallElsewhereKeepsThePolicyOnItsManager(t *testing.T) {
	admin, kubectl := controlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	config := copyConfig(t)
	editFile(t, filepath.Join(config, "default", "kustomization.yaml"),
		"namespace: backpressure-system\nnamePrefix: backpressure-\n", "namespace: ops\nnamePrefix: team-\n")
	rendered := kustomize(t, filepath.Join(config, "default"))
	objs := decode(t, rendered)
	const user = "system:serviceaccount:ops:team-operator"
	if got := serviceAccountUser(t, objs); got != user {
		t.Fatalf("the edited install runs the manager as %s, want %s", got, user)
	}
	if got := operatorPolicyUser(t, objs); got != user {
		t.Fatalf("the edited install's policy matches %s, want its manager %s", got, user)
	}

	t.Run("an overlay that renames again and lists the replacements", func(t *testing.T) {
		overlay := filepath.Join(copyConfig(t), "ops")
		if err := os.MkdirAll(overlay, 0o755); err != nil {
			t.Fatal(err)
		}
		// As operator_identity.yaml says: a copy beside the overlay's
		// kustomization.yaml, listed there.
		if err := os.WriteFile(filepath.Join(overlay, "operator_identity.yaml"),
			readRepoFile(t, "config/default/operator_identity.yaml"), 0o644); err != nil {
			t.Fatal(err)
		}
		write := func(replacements bool) []*unstructured.Unstructured {
			k := "resources:\n- ../default\nnamespace: platform\nnamePrefix: acme-\n"
			if replacements {
				k += "replacements:\n- path: operator_identity.yaml\n"
			}
			if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			return decode(t, kustomize(t, overlay))
		}
		objs := write(true)
		want := "system:serviceaccount:platform:acme-backpressure-operator"
		if got := serviceAccountUser(t, objs); got != want {
			t.Fatalf("the overlay runs the manager as %s, want %s", got, want)
		}
		if got := operatorPolicyUser(t, objs); got != want {
			t.Errorf("the overlay's policy matches %s, want its manager %s", got, want)
		}
		for _, o := range find(objs, "ValidatingAdmissionPolicyBinding") {
			if name := o.Object["spec"].(map[string]any)["policyName"]; !strings.HasPrefix(name.(string), "acme-") {
				t.Errorf("binding %s names policy %v, which the overlay renamed", o.GetName(), name)
			}
		}
		if got := operatorPolicyUser(t, write(false)); got == want {
			t.Errorf("without the replacements the overlay's policy still matches %s: the test shows nothing", got)
		}
	})

	// Applied for real, but for the CRDs, which the other tests share and
	// which are the same.
	var docs [][]byte
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data)
	}
	install := bytes.Join(docs, []byte("---\n"))
	apply(t, kubectl, install)
	t.Cleanup(func() {
		path := filepath.Join(t.TempDir(), "install.yaml")
		if err := os.WriteFile(path, install, 0o600); err != nil {
			t.Error(err)
			return
		}
		if out, stderr, err := kubectl.Run("delete", "--wait=false", "--ignore-not-found", "-f", path); err != nil {
			t.Errorf("kubectl delete: %v\n%s%s", err, out, stderr)
		}
	})

	ensureNamespace(t, "policy-elsewhere")
	operator := kubernetes.NewForConfigOrDie(impersonate(admin, user)).CoreV1().ConfigMaps("policy-elsewhere")
	unlabelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns-custom"}, Data: map[string]string{"k": "v"}}
	waitForPolicy(ctx, t, "the edited install's policy", func(o metav1.PatchOptions) error {
		_, err := operator.Create(ctx, unlabelled, metav1.CreateOptions{DryRun: o.DryRun})
		return err
	})
	_, err := operator.Create(ctx, unlabelled, metav1.CreateOptions{})
	denied(t, err, "create-labelled-only")
	if err != nil && !strings.Contains(err.Error(), "team-operator-configmaps") {
		t.Errorf("denied by another policy than the edited install's team-operator-configmaps: %v", err)
	}
}
