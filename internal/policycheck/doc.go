// Package policycheck is the manager's own check that the admission
// policies holding it and the application pods are in force.
//
// The policies (config/policies, the chart's admission-policies.yaml) fail
// closed only on an error in their own expressions. Everything else makes
// them fail open, silently: a binding deleted or never applied, an API
// server older than 1.30 that does not serve the API, an install whose
// namespace or ServiceAccount differs from the name the operator's policy
// matches. A Checker finds each of those from inside the manager, at start
// and then periodically, and says so three ways: the manager's readiness
// (a healthz.Checker), a gauge per policy
// (backpressure_admission_policy_enforced), and an event on the manager's
// ServiceAccount when a policy stops or starts being enforced.
//
// The operator's policy is checked by its effect: the manager asks the API
// server to create, as a dry run, a ConfigMap the policy must deny, and the
// policy holds only if the API server denies it by the policy's rule. That
// proves at once that the API is served, that the policy and its binding
// exist, that the binding denies, and that the policy matches the identity
// the manager runs as, without parsing its expression. When the probe is
// let through, the Checker reads the policies and bindings to say which of
// those is missing. The pod-writes policy judges pods, not the manager, so
// it is checked by reading: a policy labelled
// backpressure.dev/policy=pod-writes, bound with the Deny action.
package policycheck
