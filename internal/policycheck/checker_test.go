package policycheck

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
)

var env testenv.Shared

func TestMain(m *testing.M) { env.Main(m) }

const (
	// managerNamespace and managerName are the identity config/policies
	// names before an install fills in its own.
	managerNamespace = "backpressure-system"
	managerName      = "backpressure-operator"
	// interval is the tests' check interval.
	interval = 250 * time.Millisecond
	// reportBound is how long a change may take to be reported: the check
	// interval, plus the moment the API server's own informers take to
	// stop (or start) enforcing a policy, with a margin for a loaded
	// machine.
	reportBound = interval + 15*time.Second
	// steadyFor is how long the API server must have denied a probe
	// without a break before a test takes the policy as loaded.
	steadyFor = 3 * time.Second
)

// policies reads the policies and bindings of config/policies as they are
// written there.
func policies(t *testing.T) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var ps []*admissionregistrationv1.ValidatingAdmissionPolicy
	var bs []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for _, f := range []string{"operator_configmaps.yaml", "pod_writes.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "config", "policies", f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var raw map[string]any
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch raw["kind"] {
			case "ValidatingAdmissionPolicy":
				p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
				fromUnstructured(t, raw, p)
				ps = append(ps, p)
			case "ValidatingAdmissionPolicyBinding":
				b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
				fromUnstructured(t, raw, b)
				bs = append(bs, b)
			}
		}
	}
	if len(ps) != 2 || len(bs) != 2 {
		t.Fatalf("config/policies holds %d policies and %d bindings, want 2 and 2", len(ps), len(bs))
	}
	return ps, bs
}

// install creates the policies and bindings of config/policies, each name
// prefixed so that tests sharing the API server do not collide, and
// returns the bindings as created.
func install(ctx context.Context, t *testing.T, cs kubernetes.Interface, prefix string) map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	t.Helper()
	ps, bs := policies(t)
	adm := cs.AdmissionregistrationV1()
	for _, p := range ps {
		p.Name = prefix + p.Name
		if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, b := range bs {
		b.Name, b.Spec.PolicyName = prefix+b.Name, prefix+b.Spec.PolicyName
		if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		out[b.Labels[PolicyLabel]] = b.DeepCopy()
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, b := range out {
			_ = adm.ValidatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{})
		}
		for _, p := range ps {
			_ = adm.ValidatingAdmissionPolicies().Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	})
	return out
}

// asManager returns a client acting as the service account ns/name, with
// what the manager's role grants the check: create ConfigMaps, read the
// policies and bindings.
func asManager(ctx context.Context, t *testing.T, admin *rest.Config, ns, name string) kubernetes.Interface {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(admin)
	subject := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policycheck-" + ns + "-" + name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, Verbs: []string{"get", "list"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	c := rest.CopyConfig(admin)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	return kubernetes.NewForConfigOrDie(c)
}

// ensureNamespace creates ns unless it exists.
func ensureNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// started is a running Checker and what it reports through.
type started struct {
	checker *Checker
	reg     *prometheus.Registry
}

// start runs a Checker for client, expecting every policy, with a real
// event recorder writing to the API server, until the test ends.
func start(ctx context.Context, t *testing.T, admin kubernetes.Interface, client kubernetes.Interface, probeNamespace string) *started {
	t.Helper()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: admin.EventsV1()})
	ctx, stop := context.WithCancel(ctx)
	broadcaster.StartRecordingToSink(ctx.Done())
	reg := prometheus.NewPedanticRegistry()
	c, err := New(client, Options{
		Policies:   Policies,
		Namespace:  probeNamespace,
		Interval:   interval,
		Recorder:   broadcaster.NewRecorder(scheme.Scheme, "backpressure-operator"),
		Registerer: reg,
		Logger:     testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
		broadcaster.Shutdown()
	})
	return &started{checker: c, reg: reg}
}

// gauge returns backpressure_admission_policy_enforced for policy.
func (s *started) gauge(t *testing.T, policy string) float64 {
	t.Helper()
	return testutil.ToFloat64(s.checker.enforced.WithLabelValues(policy))
}

// await polls cond until it holds and returns how long that took; it fails
// the test when that is longer than reportBound.
func await(t *testing.T, what string, cond func() error) time.Duration {
	const bound = reportBound
	t.Helper()
	begin := time.Now()
	for {
		err := cond()
		if err == nil {
			return time.Since(begin)
		}
		if time.Since(begin) > bound {
			t.Fatalf("%s: not within %s: %v", what, bound, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventFor returns the reasons and notes of the events about the manager's
// ServiceAccount.
func eventsFor(ctx context.Context, cs kubernetes.Interface, ns, name string) (map[string][]string, error) {
	list, err := cs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "ServiceAccount" && e.Regarding.Name == name {
			out[e.Reason] = append(out[e.Reason], e.Note)
		}
	}
	return out, nil
}

// The manager reports a binding deleted from under it within a bound, three
// ways: its readiness fails naming the policy, the gauge drops to 0, and a
// Warning event on its ServiceAccount says why; the binding back, all
// three say so again. The same for the pod-writes policy, which it checks
// by reading.
func TestReportsAMissingBindingWithinABound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := env.Config(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ensureNamespace(ctx, t, admin, managerNamespace)
	ensureNamespace(ctx, t, admin, "probe")
	bindings := install(ctx, t, admin, "")
	manager := asManager(ctx, t, cfg, managerNamespace, managerName)
	// The API server loads new policies through informers, and a first
	// denial does not mean the next probe is denied too (seen on a loaded
	// machine: denied, then let through once, then denied for good). The
	// Checker starts once the API server has denied steadily for a while,
	// so that every event below comes from a change the test made.
	var deniedSince time.Time
	await(t, "the API server to enforce the policy steadily", func() error {
		_, err := manager.CoreV1().ConfigMaps("probe").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			deniedSince = time.Time{}
			return errors.New("not yet")
		case deniedSince.IsZero():
			deniedSince = time.Now()
		}
		if time.Since(deniedSince) < steadyFor {
			return errors.New("denied, not yet for long")
		}
		return nil
	})
	s := start(ctx, t, admin, manager, "probe")

	await(t, "both policies enforced", func() error { return s.checker.Healthz(nil) })
	if got, err := eventsFor(ctx, admin, managerNamespace, managerName); err != nil || len(got) != 0 {
		t.Fatalf("events before any change: %v, %v; want none", got, err)
	}
	for _, p := range Policies {
		if got := s.gauge(t, p); got != 1 {
			t.Errorf("gauge of %s = %v, want 1", p, got)
		}
	}
	if r := s.checker.Results()[OperatorConfigMaps]; !strings.Contains(r.Reason, "operator-configmaps") {
		t.Errorf("the enforced operator policy's finding %q does not name the policy that denied the probe", r.Reason)
	}

	adm := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	for _, policy := range Policies {
		t.Run(policy, func(t *testing.T) {
			b := bindings[policy]
			if err := adm.Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			took := await(t, "the missing binding reported", func() error {
				err := s.checker.Healthz(nil)
				switch {
				case err == nil:
					return errors.New("still ready")
				case !strings.Contains(err.Error(), "admission policy "+policy+" is not enforced") ||
					!strings.Contains(err.Error(), "no binding denies with it"):
					return err
				case s.gauge(t, policy) != 0:
					return errors.New("the gauge is still 1")
				}
				got, err := eventsFor(ctx, admin, managerNamespace, managerName)
				if err != nil {
					return err
				}
				for _, note := range got[EventReasonNotEnforced] {
					if strings.Contains(note, "admission policy "+policy+" is not enforced") {
						return nil
					}
				}
				return errors.New("no Warning event yet")
			})
			t.Logf("a deleted %s binding was reported after %s (readiness, gauge, event)", policy, took.Round(time.Millisecond))

			b.ResourceVersion = ""
			if _, err := adm.Create(ctx, b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			await(t, "the binding back", func() error {
				if err := s.checker.Healthz(nil); err != nil {
					return err
				}
				got, err := eventsFor(ctx, admin, managerNamespace, managerName)
				if err != nil {
					return err
				}
				for _, note := range got[EventReasonEnforced] {
					if strings.Contains(note, "admission policy "+policy+" is enforced again") {
						return nil
					}
				}
				return errors.New("no Normal event yet")
			})
			if got := s.gauge(t, policy); got != 1 {
				t.Errorf("gauge of %s = %v after the binding came back, want 1", policy, got)
			}
		})
	}
}

// An install whose policy names another identity than the one the manager
// runs as (a kustomize namespace or prefix changed without the
// replacements) judges nobody; the manager finds and says so.
func TestReportsAPolicyThatDoesNotNameTheManager(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := env.Config(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ensureNamespace(ctx, t, admin, "ops")
	ensureNamespace(ctx, t, admin, "probe-ops")
	install(ctx, t, admin, "ops-")
	s := start(ctx, t, admin, asManager(ctx, t, cfg, "ops", "team-operator"), "probe-ops")
	await(t, "the finding", func() error {
		r, ok := s.checker.Results()[OperatorConfigMaps]
		switch {
		case !ok:
			return errors.New("not checked yet")
		case r.Enforced:
			return errors.New("reported enforced")
		case !strings.Contains(r.Reason, "does not match the manager's identity system:serviceaccount:ops:team-operator"):
			return errors.New(r.Reason)
		}
		return nil
	})
	if err := s.checker.Healthz(nil); err == nil || !strings.Contains(err.Error(), OperatorConfigMaps) {
		t.Errorf("readiness = %v, want it to fail naming %s", err, OperatorConfigMaps)
	}
	if got := s.gauge(t, OperatorConfigMaps); got != 0 {
		t.Errorf("gauge = %v, want 0", got)
	}
	// The pod-writes policy judges pods, not the manager: bound, it holds.
	if r := s.checker.Results()[PodWrites]; !r.Enforced {
		t.Errorf("pod-writes reported not enforced: %s", r.Reason)
	}
}

// Before its first check a Checker is not ready; one that expects no
// policy is, and checks nothing.
func TestReadinessBeforeAndWithoutChecks(t *testing.T) {
	c, err := New(nil, Options{Policies: Policies, Namespace: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Healthz(nil); err == nil || !strings.Contains(err.Error(), "not checked yet") {
		t.Errorf("Healthz before the first check = %v, want not checked yet", err)
	}
	off, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := off.Healthz(nil); err != nil {
		t.Errorf("Healthz with no policy expected = %v, want nil", err)
	}
	if err := off.Start(context.Background()); err != nil {
		t.Errorf("Start with no policy expected = %v, want nil at once", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Policies: []string{"configmaps"}, Namespace: "probe"},
		{Policies: Policies},
		{Policies: Policies, Namespace: "probe", Interval: -time.Second},
	} {
		if _, err := New(nil, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func TestServiceAccount(t *testing.T) {
	for user, want := range map[string][2]string{
		"system:serviceaccount:backpressure-system:backpressure-operator": {"backpressure-system", "backpressure-operator"},
		"system:serviceaccount:ops:":                                      {},
		"system:serviceaccount:ops":                                       {},
		"system:serviceaccount:ops:a:b":                                   {},
		"kubernetes-admin":                                                {},
	} {
		ns, name, ok := serviceAccount(user)
		if ok != (want[0] != "") || ns != want[0] || name != want[1] {
			t.Errorf("serviceAccount(%q) = %q, %q, %v; want %q", user, ns, name, ok, want)
		}
	}
}

func fromUnstructured(t *testing.T, raw map[string]any, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, out); err != nil {
		t.Fatal(err)
	}
}
