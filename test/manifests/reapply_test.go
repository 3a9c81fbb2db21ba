package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The admission policies, as kustomize and the chart render them, apply a
// second time with nothing to change: kubectl apply says "unchanged" for
// each, and GitOps tools see no drift. (The API server defaults a rule's
// scope to "*"; a rule that did not say it was replaced on every apply.)
func TestPoliciesReapplyUnchanged(t *testing.T) {
	_, kubectl := controlPlane(t)
	for name, rendered := range map[string][]byte{
		"kustomize config/policies": kustomize(t, "config/policies"),
		"helm template":             helmTemplate(t),
	} {
		t.Run(name, func(t *testing.T) {
			var docs []string
			for _, o := range decode(t, rendered) {
				if !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
					continue
				}
				data, err := yaml.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, string(data))
			}
			if len(docs) < 2 {
				t.Fatalf("%s rendered %d admission policies and bindings, want at least 2", name, len(docs))
			}
			path := filepath.Join(t.TempDir(), "policies.yaml")
			if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, stderr, err := kubectl.Run("apply", "-f", path); err != nil {
				t.Fatalf("kubectl apply: %v\n%s%s", err, out, stderr)
			}
			out, stderr, err := kubectl.Run("apply", "-f", path)
			if err != nil {
				t.Fatalf("kubectl apply again: %v\n%s%s", err, out, stderr)
			}
			for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
				if !strings.HasSuffix(line, " unchanged") {
					t.Errorf("%s applied a second time: %q, want unchanged", name, line)
				}
			}
		})
	}
}
