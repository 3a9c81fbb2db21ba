package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/cmd/kubectl-backpressure/livefixture"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

// startCluster starts a real API server (envtest) for the test, and returns
// a client of the kinds the live commands read and the kubectl whose
// kubeconfig the plugin is given.
func startCluster(t *testing.T) (client.Client, *testenv.Kubectl) {
	t.Helper()
	env, cfg := testenv.Start(t)
	kubectl, err := testenv.NewKubectl(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := newLiveScheme()
	if err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return k8s, kubectl
}

// TestLive runs the live commands in-process against a real API server
// (envtest) holding livefixture's objects, through a kubeconfig file as a
// user's.
func TestLive(t *testing.T) {
	k8s, kubectl := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := livefixture.Apply(ctx, k8s); err != nil {
		t.Fatal(err)
	}

	// live runs the plugin with the kubeconfig and returns its stdout; it
	// fails the test on a non-zero exit.
	live := func(t *testing.T, args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append(args, "--kubeconfig", kubectl.Kubeconfig)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
		}
		return stdout
	}
	// failing runs the plugin and returns its one error line.
	failing := func(t *testing.T, args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append(args, "--kubeconfig", kubectl.Kubeconfig)...)
		if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want exit 1 and one line on stderr", args, code, stdout, stderr)
		}
		return strings.TrimSpace(stderr)
	}
	ns := livefixture.Namespace

	t.Run("status table", func(t *testing.T) {
		out := live(t, "status", "-n", ns)
		expectLines(t, "status", out,
			"storefront/logistics-api → logistics.storefront.example.com, for the pods of Deployment/search-gateway",
			"contract 50 in flight × 80% safety = 40 permits",
			"divisor 3, from ReadyPods (spec 3, HPA 2..20 desired 3, 3 pods exist, 3 Ready)",
			"division revision 3: 40 usable = 13 × 3 + 1, to give 2 pods 13 and 1 pod 14; 33 handed out, 40 held",
			"handover False HandoverInProgress: 33 of 40 permits handed out, 40 held; pods search-gateway-c wait for pods search-gateway-b to let go of capacity",
			"applied 1 of 3 pods applied revision 3; not yet: search-gateway-b, search-gateway-c",
			"ready True, reason DemandExceedsQuota",
			"configmap search-gateway-backpressure, key logistics-api.json",
			"POD READY PERMITS TARGET HOLDS APPLIED",
			"search-gateway-a yes 14 - - yes",
			"search-gateway-b yes 13 - 20 no: revision 2",
			"search-gateway-c yes 6 13 - no: nothing acknowledged",
			"DemandExceedsQuota demand 1900/s × typical latency 220ms = 418 calls in flight",
		)
		if strings.Contains(out, "carrier-api") {
			t.Errorf("status -n %s shows a quota of another namespace:\n%s", ns, out)
		}
	})

	t.Run("status of an empty namespace", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, "status", "-n", "default", "--kubeconfig", kubectl.Kubeconfig)
		if code != 0 || stdout != "" || stderr != "No DownstreamQuotas found in namespace default.\n" {
			t.Errorf("status -n default: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if got := live(t, "status", "-n", "default", "-o", "json"); !strings.Contains(got, `"items": []`) {
			t.Errorf("status -n default -o json printed %s, want an empty List", got)
		}
	})

	t.Run("status -A", func(t *testing.T) {
		out := live(t, "status", "-A")
		// By namespace: storefront, then warehouse.
		first, second := strings.Index(out, "storefront/logistics-api"), strings.Index(out, "warehouse/carrier-api")
		if first < 0 || second < first {
			t.Fatalf("status -A: want storefront/logistics-api, then warehouse/carrier-api:\n%s", out)
		}
		expectLines(t, "status -A", out[second:],
			"contract 12 in flight × 80% safety = 9 permits",
			"divisor none yet: the operator has not reconciled the quota",
			"applied nothing to apply yet",
			"problem Deployment/dispatcher: not found in namespace warehouse",
		)
	})

	t.Run("status -o json", func(t *testing.T) {
		var got quotaStatus
		dec := json.NewDecoder(strings.NewReader(live(t, "status", livefixture.Quota, "-n", ns, "-o", "json")))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Kind != statusViewKind || got.APIVersion != statusViewVersion || got.Metadata != (statusMeta{Name: livefixture.Quota, Namespace: ns}) {
			t.Errorf("type and metadata: %+v %+v", got.TypeMeta, got.Metadata)
		}
		ptr := func(n int32) *int32 { return &n }
		want := []podView{
			{Name: "search-gateway-a", Exists: true, Ready: true, Permits: 14, Acknowledged: livefixture.Epoch + "/3", Applied: true},
			{Name: "search-gateway-b", Exists: true, Ready: true, Permits: 13, Holds: ptr(20), Acknowledged: livefixture.Epoch + "/2"},
			{Name: "search-gateway-c", Exists: true, Ready: true, Permits: 6, Target: ptr(13)},
		}
		if diff := cmp.Diff(want, got.Pods); diff != "" {
			t.Errorf("pods (-want +got):\n%s", diff)
		}
		if got.Applied != 1 || got.Total != 3 || got.AllApplied || got.Contract.Usable != 40 || got.Division == nil || got.Division.Held != 40 {
			t.Errorf("applied %d of %d (all %v), usable %d, division %+v; want 1 of 3, false, 40, held 40", got.Applied, got.Total, got.AllApplied, got.Contract.Usable, got.Division)
		}
	})

	t.Run("status -o yaml", func(t *testing.T) {
		var got struct {
			APIVersion string         `json:"apiVersion"`
			Kind       string         `json:"kind"`
			Items      []*quotaStatus `json:"items"`
		}
		if err := yaml.UnmarshalStrict([]byte(live(t, "status", "-A", "-o", "yaml")), &got); err != nil {
			t.Fatal(err)
		}
		if got.APIVersion != "v1" || got.Kind != "List" || len(got.Items) != 2 || got.Items[0].Metadata.Name != livefixture.Quota || got.Items[1].Metadata.Name != "carrier-api" {
			t.Errorf("status -A -o yaml: kind %q with %d items, want a List of logistics-api and carrier-api", got.Kind, len(got.Items))
		}
	})

	t.Run("status -o name and jsonpath", func(t *testing.T) {
		if got := live(t, "status", "-A", "-o", "name"); got != "downstreamquota.backpressure.dev/logistics-api\ndownstreamquota.backpressure.dev/carrier-api\n" {
			t.Errorf("-o name printed %q", got)
		}
		path := `jsonpath={range .pods[*]}{.name}={.applied}{" "}{end}`
		if got := live(t, "status", livefixture.Quota, "-n", ns, "-o", path); got != "search-gateway-a=true search-gateway-b=false search-gateway-c=false " {
			t.Errorf("-o %s printed %q", path, got)
		}
	})

	t.Run("status follows the acknowledgements", func(t *testing.T) {
		if got := live(t, "status", livefixture.Quota, "-n", ns, "-o", "jsonpath={.allApplied}"); got != "false" {
			t.Fatalf("allApplied before = %q, want false", got)
		}
		for _, name := range []string{"search-gateway-b", "search-gateway-c"} {
			var pod corev1.Pod
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Annotations = map[string]string{"applied.backpressure.dev/" + livefixture.Quota: livefixture.Epoch + "/3"}
			if err := k8s.Patch(ctx, &pod, patch); err != nil {
				t.Fatal(err)
			}
		}
		if got := live(t, "status", livefixture.Quota, "-n", ns, "-o", "jsonpath={.allApplied}"); got != "true" {
			t.Errorf("allApplied after every pod acknowledged revision 3 = %q, want true", got)
		}
		if out := live(t, "status", livefixture.Quota, "-n", ns); !containsSpaced(out, "applied every pod, 3 of 3, applied revision 3") {
			t.Errorf("status after every pod acknowledged:\n%s", out)
		}
	})

	t.Run("plan dq/NAME", func(t *testing.T) {
		out := live(t, "plan", "dq/"+livefixture.Quota, "-n", ns)
		expectLines(t, "plan dq/NAME", out,
			"storefront/logistics-api: HorizontalPodAutoscaler search-gateway scales Deployment/search-gateway over 2..20 replicas (desired now 3)",
			"logistics-api: 50 in flight × 80% safety = 40 permits to divide (below one: Strict)",
			"2 20 0 40 (100%) 40 (100%)",
			"20 2 0 40 (100%) 40 (100%)",
			"Bootstrap share: 2 permits per pod = floor(40 usable / 20, the most replicas): give it to runtime's bootstrap plan",
		)
		var got sweepBootstrapJSON
		dec := json.NewDecoder(strings.NewReader(live(t, "plan", "downstreamquota/"+livefixture.Quota, "-n", ns, "-o", "json")))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if len(got.Sweep) != 19 || got.Sweep[0].Replicas != 2 || got.Bootstrap != (bootstrapJSON{Permits: 2, Usable: 40, MaxReplicas: 20}) {
			t.Errorf("plan -o json: %d rows from %d, bootstrap %+v; want 19 from 2, 2 of 40 over 20", len(got.Sweep), got.Sweep[0].Replicas, got.Bootstrap)
		}
		// -o yaml and -o jsonpath=... take the same figures, as status's do.
		var fromYAML sweepBootstrapJSON
		if err := yaml.UnmarshalStrict([]byte(live(t, "plan", "dq/"+livefixture.Quota, "-n", ns, "-o", "yaml")), &fromYAML); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got, fromYAML, cmp.AllowUnexported(sweepBootstrapJSON{})); diff != "" {
			t.Errorf("plan dq/NAME -o yaml differs from -o json (-json +yaml):\n%s", diff)
		}
		if out := live(t, "plan", "dq/"+livefixture.Quota, "-n", ns, "-o", "jsonpath={.bootstrap.permits}/{.bootstrap.maxReplicas}"); out != "2/20" {
			t.Errorf("plan dq/NAME -o jsonpath printed %q, want 2/20", out)
		}
		// The flags override the live range and spec.
		out = live(t, "plan", "dq/"+livefixture.Quota, "-n", ns, "--replicas", "3", "--concurrency", "60")
		if !containsSpaced(out, "logistics-api → logistics.storefront.example.com: 60 in flight × 80% safety over 3 replicas") {
			t.Errorf("plan dq/NAME --replicas 3 --concurrency 60:\n%s", out)
		}
	})

	t.Run("plan dq/NAME errors", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"plan", "dq/carrier-api", "-n", livefixture.OtherNamespace}, "error: dq/carrier-api: no HorizontalPodAutoscaler scales Deployment/dispatcher in namespace warehouse; give --replicas N or --replicas-range MIN..MAX"},
			{[]string{"plan", "dq/missing", "-n", ns}, `error: downstreamquotas.backpressure.dev "missing" not found`},
			{[]string{"status", "missing", "-n", ns}, `error: downstreamquotas.backpressure.dev "missing" not found`},
			// An error in the live spec names the quota, as one in a file
			// names the file.
			{[]string{"plan", "dq/" + livefixture.Quota, "-n", ns, "--deadline", "100ms", "--replicas", "3"}, "error: dq/logistics-api: spec.maxQueueWait: must be less than deadline 100ms, got 100ms"},
		} {
			if got := failing(t, tt.args...); got != tt.want {
				t.Errorf("%v:\n got %q\nwant %q", tt.args, got, tt.want)
			}
		}
	})

	t.Run("completion", func(t *testing.T) {
		// complete asks the shell completion for the last word of a
		// command line of the plugin, as the scripts of the completion
		// command do.
		complete := func(command string, words ...string) string {
			t.Helper()
			args := append([]string{"__complete", command, "--kubeconfig", kubectl.Kubeconfig}, words...)
			stdout, stderr, code := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
			return stdout
		}
		if got := complete("status", "-n", ns, ""); !strings.HasPrefix(got, "logistics-api\tlogistics.storefront.example.com\n:4\n") {
			t.Errorf("completion of status QUOTA:\n%s", got)
		}
		if got := complete("plan", "-n", ns, "dq/l"); !strings.HasPrefix(got, "dq/logistics-api\tlogistics.storefront.example.com\n:4\n") {
			t.Errorf("completion of plan dq/NAME:\n%s", got)
		}
		if got := complete("status", "-n", "ware"); !strings.HasPrefix(got, "warehouse\n:4\n") {
			t.Errorf("completion of -n:\n%s", got)
		}
		if got := complete("status", "-n", livefixture.OtherNamespace, ""); !strings.HasPrefix(got, "carrier-api\tcarrier.example.com\n:4\n") {
			t.Errorf("completion of status QUOTA in %s:\n%s", livefixture.OtherNamespace, got)
		}
		if got := complete("status", "-n", ns, livefixture.Quota, ""); strings.Contains(got, "logistics-api") {
			t.Errorf("completion of a second argument offers a quota again:\n%s", got)
		}
	})

	t.Run("get -o yaml | plan -f -", func(t *testing.T) {
		// What kubectl get prints, status and managed fields included,
		// is a manifest plan reads from stdin.
		manifest, stderr, err := kubectl.Run("get", "dq", livefixture.Quota, "-n", ns, "-o", "yaml")
		if err != nil {
			t.Fatalf("kubectl get: %v: %s", err, stderr)
		}
		var stdout, errOut strings.Builder
		if code := run([]string{"plan", "-f", "-", "--replicas-range", "2..20"}, strings.NewReader(manifest), &stdout, &errOut); code != 0 {
			t.Fatalf("plan -f -: exit %d: %s", code, errOut.String())
		}
		if !containsSpaced(stdout.String(), "Bootstrap share: 2 permits per pod = floor(40 usable / 20, the most replicas)") {
			t.Errorf("plan -f - over 2..20:\n%s", stdout.String())
		}
	})
}

// TestCompletionScripts checks that the completion command writes a script
// for each shell, naming the plugin's binary.
func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_kubectl-backpressure",
		"zsh":  "#compdef kubectl-backpressure",
		"fish": "complete -c kubectl-backpressure",
	} {
		out, stderr, code := runCLI(t, "completion", shell)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, script lacks %q", shell, code, stderr, want)
		}
	}
	// The script must be valid for the shell that sources it; bash is the
	// one this machine surely has.
	if bash, err := exec.LookPath("bash"); err == nil {
		out, _, _ := runCLI(t, "completion", "bash")
		f := t.TempDir() + "/completion.bash"
		if err := os.WriteFile(f, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n: %v: %s", err, msg)
		}
	}
}

// expectLines fails the test for each of wants that out lacks, comparing
// runs of spaces as one.
func expectLines(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !containsSpaced(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}
