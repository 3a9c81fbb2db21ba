package main

import (
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/backpressure-dev/backpressure-operator/internal/policycheck"
)

// parsePolicies parses the value of --admission-policies: policy names
// separated by commas; empty expects none.
func parsePolicies(v string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if _, err := policycheck.New(nil, policycheck.Options{Policies: out, Namespace: "-"}); err != nil {
		return nil, err
	}
	return out, nil
}

// addPolicyCheck runs the admission policy check in every replica and
// makes the replicas' readiness depend on it. The probe goes to namespace,
// one the manager may create ConfigMaps in.
func addPolicyCheck(mgr manager.Manager, cfg *rest.Config, o *options, namespace string) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("manager: policy check client: %w", err)
	}
	checker, err := policycheck.New(client, policycheck.Options{
		Policies:   o.policies,
		Namespace:  namespace,
		Interval:   o.policyCheckInterval,
		Recorder:   mgr.GetEventRecorder(eventSource),
		Registerer: ctrlmetrics.Registry,
		Logger:     mgr.GetLogger().WithName("policycheck"),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := mgr.Add(checker); err != nil {
		return fmt.Errorf("manager: add the policy check: %w", err)
	}
	if err := mgr.AddReadyzCheck("admission-policies", checker.Healthz); err != nil {
		return fmt.Errorf("manager: add readiness check: %w", err)
	}
	return nil
}
