package manifests

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// SECURITY.md's threat model names what the install ships, as the install
// names it: the policies and their bindings, the pod-writes policy's opt-out
// label, the role through which namespace editors create quotas, the
// contract's fields that say who may use it, and the acknowledgement's
// annotation. A rename in the manifests, or a threat model that does not
// say what keeps a tenant or a pod in its place, fails here.
func TestSecurityPolicyNamesWhatShips(t *testing.T) {
	security := string(readRepoFile(t, "SECURITY.md"))
	objs := decode(t, kustomize(t, "config/default"))
	var want []string
	for _, p := range find(objs, "ValidatingAdmissionPolicy") {
		want = append(want, p.GetName())
	}
	if len(want) != 2 {
		t.Fatalf("config/default renders %d ValidatingAdmissionPolicies (%v), want 2", len(want), want)
	}
	want = append(want, podWritesOptOut(t, objs))
	for _, r := range find(objs, "ClusterRole") {
		if r.GetLabels()["rbac.authorization.k8s.io/aggregate-to-edit"] == "true" {
			want = append(want, r.GetName())
		}
	}
	want = append(want, "spec.namespaceSelector", "spec.maxWeightPerNamespace",
		plan.AppliedAnnotationPrefix, "<epoch>/released", "--listen-non-loopback", "--max-call-duration")
	for _, w := range want {
		if !strings.Contains(security, "`"+w) {
			t.Errorf("SECURITY.md does not name `%s`", w)
		}
	}
	// The statements the threat model must make, in its own words.
	for _, w := range []string{"Acknowledgements move capacity", "Enforcement is cooperative",
		"absent, it admits none", "legacy", "## Supported versions", "within 3 working days"} {
		if !strings.Contains(security, w) {
			t.Errorf("SECURITY.md does not say %q", w)
		}
	}
	if strings.Contains(security, "must\n  never change a plan") || strings.Contains(security, "only feeds `status.rollout`") {
		t.Error("SECURITY.md still says acknowledgements never change a plan")
	}
}

// podWritesOptOut returns the label=value with which a namespace leaves the
// pod-writes policy's binding, read from the binding's namespace selector.
func podWritesOptOut(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	for _, b := range find(objs, "ValidatingAdmissionPolicyBinding") {
		exprs, _, _ := unstructured.NestedSlice(b.Object, "spec", "matchResources", "namespaceSelector", "matchExpressions")
		for _, e := range exprs {
			m, _ := e.(map[string]any)
			values, _ := m["values"].([]any)
			if m["operator"] == "NotIn" && slices.Contains(values, any("false")) {
				return m["key"].(string) + "=false"
			}
		}
	}
	t.Fatal("no binding in config/default has a namespace opt-out")
	return ""
}
