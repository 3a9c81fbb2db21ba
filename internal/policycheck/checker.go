package policycheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
)

// The policy check reads the policies and bindings it diagnoses, and asks
// the API server who the manager is (SelfSubjectReview, which every
// authenticated user may create).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get;list

const (
	// PolicyLabel labels each policy and binding with the policy it is,
	// whatever name the install gave it.
	PolicyLabel = "backpressure.dev/policy"
	// OperatorConfigMaps is the policy that holds the manager to the
	// ConfigMaps it publishes plans in.
	OperatorConfigMaps = "operator-configmaps"
	// PodWrites is the policy that holds a pod's identity to acknowledging
	// on its own pod.
	PodWrites = "pod-writes"

	// DefaultInterval is how often the policies are checked after the first
	// time.
	DefaultInterval = time.Minute

	// EventReasonNotEnforced is the reason of the Warning event recorded
	// when a policy is found not enforced.
	EventReasonNotEnforced = "AdmissionPolicyNotEnforced"
	// EventReasonEnforced is the reason of the Normal event recorded when a
	// policy found not enforced is enforced again.
	EventReasonEnforced = "AdmissionPolicyEnforced"

	// probeName is the ConfigMap the probe tries to create, as a dry run.
	probeName = "backpressure-policy-probe"
	// probeRule is the start of the denial the probe must get: the rule an
	// unlabelled ConfigMap breaks first.
	probeRule = "rule create-labelled-only:"
	// checkTimeout bounds one round of checks.
	checkTimeout = 30 * time.Second
)

// Policies are the policies a Checker knows, in the order it reports them.
var Policies = []string{OperatorConfigMaps, PodWrites}

// eventActions are the actions of the events about each policy: one each,
// since the events API folds events that differ only in their note into
// one series.
var eventActions = map[string]string{OperatorConfigMaps: "CheckOperatorConfigMapsPolicy", PodWrites: "CheckPodWritesPolicy"}

// Result is what one check found about one policy.
type Result struct {
	// Enforced is true when the policy holds.
	Enforced bool
	// Reason says why it does not, or how it was found to hold.
	Reason string
}

// Options configure a Checker.
type Options struct {
	// Policies are the policies the install is expected to hold, from
	// Policies. Empty checks nothing: Healthz then always passes.
	Policies []string
	// Namespace is where the probe ConfigMap is tried: one the manager may
	// create ConfigMaps in.
	Namespace string
	// Interval is how often the policies are checked; DefaultInterval when
	// zero.
	Interval time.Duration
	// Recorder records the events; nil records none.
	Recorder events.EventRecorder
	// Registerer registers the gauge; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs each change of a policy's state.
	Logger logr.Logger
}

// Checker checks that the admission policies are in force; see the package
// documentation. Build it with New; it is safe for concurrent use.
type Checker struct {
	client   kubernetes.Interface
	opts     Options
	enforced *prometheus.GaugeVec

	mu sync.Mutex
	// results are the last check's, by policy; nil before the first.
	results map[string]Result
	// identity is the manager's username; regarding, the object events
	// are about (its ServiceAccount), or nil.
	identity  string
	regarding runtime.Object
}

// New returns a Checker that uses client, as the manager's identity, to
// check the policies o names.
func New(client kubernetes.Interface, o Options) (*Checker, error) {
	for _, p := range o.Policies {
		if !slices.Contains(Policies, p) {
			return nil, fmt.Errorf("policycheck: unknown policy %q; known: %s", p, strings.Join(Policies, ", "))
		}
	}
	if len(o.Policies) > 0 && o.Namespace == "" {
		return nil, errors.New("policycheck: a namespace for the probe is needed")
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("policycheck: the interval must be positive, got %s", o.Interval)
	}
	c := &Checker{client: client, opts: o, enforced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backpressure_admission_policy_enforced",
		Help: "1 when the admission policy holds as the install expects, 0 when the manager found it missing, unbound, or not holding the manager's identity.",
	}, []string{"policy"})}
	if o.Registerer != nil && len(o.Policies) > 0 {
		if err := o.Registerer.Register(c.enforced); err != nil {
			return nil, fmt.Errorf("policycheck: register the gauge: %w", err)
		}
	}
	return c, nil
}

// NeedLeaderElection is false: every replica checks, since each one's
// readiness reports it.
func (c *Checker) NeedLeaderElection() bool { return false }

// Start checks the policies at once and then every interval until ctx
// ends. It returns nil when ctx ends.
func (c *Checker) Start(ctx context.Context) error {
	if len(c.opts.Policies) == 0 {
		return nil
	}
	c.whoAmI(ctx)
	t := time.NewTicker(c.opts.Interval)
	defer t.Stop()
	for {
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// whoAmI asks the API server who the manager is, for the reasons and the
// events. Without an answer the Checker still checks; it only cannot name
// the identity or record events.
func (c *Checker) whoAmI(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	r, err := c.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		c.opts.Logger.Error(err, "Failed to learn the manager's identity; admission policy findings will not name it")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.identity = r.Status.UserInfo.Username
	if ns, name, ok := serviceAccount(c.identity); ok {
		c.regarding = &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		}
	}
}

// Check checks every expected policy once, records the results, and
// reports each change of state. It returns the results.
func (c *Checker) Check(ctx context.Context) map[string]Result {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	found := make(map[string]Result, len(c.opts.Policies))
	for _, p := range c.opts.Policies {
		var r Result
		var err error
		switch p {
		case OperatorConfigMaps:
			r, err = c.checkOperator(ctx)
		case PodWrites:
			r, err = c.checkBound(ctx, PodWrites)
		}
		if err != nil {
			// The API server did not answer: nothing is learnt, and the
			// last finding stands (or, before any, the check fails).
			r = Result{Reason: fmt.Sprintf("could not check: %v", err)}
			c.mu.Lock()
			if last, ok := c.results[p]; ok {
				r = last
			}
			c.mu.Unlock()
		}
		found[p] = r
	}
	c.record(found)
	return found
}

// checkOperator checks the operator's policy by its effect: a dry-run
// create of an unlabelled ConfigMap must be denied by the policy's first
// rule. When it is not, it says which part is missing.
func (c *Checker) checkOperator(ctx context.Context) (Result, error) {
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.opts.Namespace, Name: probeName}}
	_, err := c.client.CoreV1().ConfigMaps(c.opts.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		// Let through: diagnose below.
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), probeRule):
		return Result{Enforced: true, Reason: "the API server denies the manager an unlabelled ConfigMap (dry run): " + policyOf(err)}, nil
	case apierrors.IsForbidden(err):
		return Result{Reason: fmt.Sprintf("cannot tell: the dry-run create of a ConfigMap in namespace %s was denied for another reason than the policy (%v); "+
			"the manager needs create on ConfigMaps there", c.opts.Namespace, err)}, nil
	default:
		return Result{}, err
	}
	why, err := c.diagnose(ctx, OperatorConfigMaps)
	if err != nil {
		return Result{}, err
	}
	return Result{Reason: fmt.Sprintf("the API server let the manager (%s) create an unlabelled ConfigMap in namespace %s (dry run): %s",
		c.who(), c.opts.Namespace, why)}, nil
}

// checkBound checks a policy that does not judge the manager by reading
// it: a policy labelled for it, bound with the Deny action.
func (c *Checker) checkBound(ctx context.Context, policy string) (Result, error) {
	why, err := c.diagnose(ctx, policy)
	if err != nil {
		return Result{}, err
	}
	if why != "" {
		return Result{Reason: why}, nil
	}
	return Result{Enforced: true, Reason: "a ValidatingAdmissionPolicy labelled " + PolicyLabel + "=" + policy + " is bound with the Deny action"}, nil
}

// diagnose reads the policies and bindings labelled for policy and says
// what keeps it from being enforced, or "" when nothing it can see does.
func (c *Checker) diagnose(ctx context.Context, policy string) (string, error) {
	sel := metav1.ListOptions{LabelSelector: PolicyLabel + "=" + policy}
	adm := c.client.AdmissionregistrationV1()
	policies, err := adm.ValidatingAdmissionPolicies().List(ctx, sel)
	if apierrors.IsNotFound(err) {
		return "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies (Kubernetes older than 1.30, or the API turned off): no policy can be enforced", nil
	}
	if err != nil {
		return "", fmt.Errorf("list the %s policies: %w", policy, err)
	}
	bindings, err := adm.ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return "", fmt.Errorf("list the %s bindings: %w", policy, err)
	}
	names := map[string]bool{}
	for _, p := range policies.Items {
		names[p.Name] = true
	}
	if len(names) == 0 {
		return fmt.Sprintf("no ValidatingAdmissionPolicy labelled %s=%s exists; apply config/policies or the chart's admissionPolicies", PolicyLabel, policy), nil
	}
	var unbound []string
	for _, b := range bindings.Items {
		if !names[b.Spec.PolicyName] {
			unbound = append(unbound, b.Name+" (names policy "+b.Spec.PolicyName+", which does not exist)")
			continue
		}
		if slices.Contains(b.Spec.ValidationActions, "Deny") {
			if policy == OperatorConfigMaps {
				return fmt.Sprintf("policy %s is bound by %s, but does not match the manager's identity %s; "+
					"render the install with the replacements of config/default/operator_identity.yaml, or the chart", b.Spec.PolicyName, b.Name, c.who()), nil
			}
			return "", nil
		}
		unbound = append(unbound, b.Name+" (without the Deny action)")
	}
	why := fmt.Sprintf("policy %s exists but no binding denies with it", strings.Join(slices.Sorted(maps.Keys(names)), ", "))
	if len(unbound) > 0 {
		why += "; bindings labelled for it: " + strings.Join(unbound, ", ")
	}
	return why, nil
}

// record stores the results, sets the gauge, and logs and records an event
// for each policy whose state changed (or, at the first check, that is not
// enforced).
func (c *Checker) record(found map[string]Result) {
	c.mu.Lock()
	last := c.results
	c.results = found
	regarding := c.regarding
	c.mu.Unlock()
	for _, p := range c.opts.Policies {
		r := found[p]
		v := 0.0
		if r.Enforced {
			v = 1
		}
		c.enforced.WithLabelValues(p).Set(v)
		prev, seen := last[p]
		if seen && prev.Enforced == r.Enforced {
			continue
		}
		if r.Enforced {
			c.opts.Logger.Info("Admission policy enforced", "policy", p, "reason", r.Reason)
			if seen && regarding != nil && c.opts.Recorder != nil {
				c.opts.Recorder.Eventf(regarding, nil, corev1.EventTypeNormal, EventReasonEnforced, eventActions[p], "admission policy %s is enforced again: %s", p, r.Reason)
			}
			continue
		}
		c.opts.Logger.Info("Admission policy not enforced", "policy", p, "reason", r.Reason)
		if regarding != nil && c.opts.Recorder != nil {
			c.opts.Recorder.Eventf(regarding, nil, corev1.EventTypeWarning, EventReasonNotEnforced, eventActions[p], "admission policy %s is not enforced: %s", p, r.Reason)
		}
	}
}

// Results returns the last check's results by policy; nil before the
// first check.
func (c *Checker) Results() map[string]Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.results)
}

// Healthz is a readiness check: it fails until the first check, and while
// an expected policy is not enforced, naming it and why.
func (c *Checker) Healthz(*http.Request) error {
	if len(c.opts.Policies) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.results == nil {
		return errors.New("admission policies not checked yet")
	}
	var errs []error
	for _, p := range c.opts.Policies {
		if r := c.results[p]; !r.Enforced {
			errs = append(errs, fmt.Errorf("admission policy %s is not enforced: %s", p, r.Reason))
		}
	}
	return errors.Join(errs...)
}

// who names the manager's identity, or says it is not known.
func (c *Checker) who() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.identity == "" {
		return "identity unknown"
	}
	return c.identity
}

// policyOf returns the part of a denial that names the policy and binding.
func policyOf(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "ValidatingAdmissionPolicy "); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.Index(msg, " denied request"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// serviceAccount splits a service account's username,
// system:serviceaccount:<namespace>:<name>.
func serviceAccount(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}
