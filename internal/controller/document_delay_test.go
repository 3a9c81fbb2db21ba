package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// TestPublishedDocumentCarriesTheUnacknowledgedDelay: a pod learns from its
// document how long the operator waits for a pod that does not acknowledge
// (the default, or the quota's own), so that one cut off from its plan
// source gives its share up before the operator gives it away.
func TestPublishedDocumentCarriesTheUnacknowledgedDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay *metav1.Duration
		want  float64
	}{
		{"default", nil, DefaultUnacknowledgedDelay.Seconds()},
		{"the quota's", &metav1.Duration{Duration: 40 * time.Second}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := fakeQuota(inlineGate, "Deployment", "api")
			q.Spec.Handover.UnacknowledgedDelay = tc.delay
			env := newFakeEnv(guardDeployment("shop", "api", 1), guardPod("shop", "api", "api-0"), q)
			env.reconcileInline(t)
			d, _ := inlineDocument(t, env)
			if d.UnacknowledgedDelaySeconds != tc.want || d.For("api-0").Permits == 0 {
				t.Errorf("published unacknowledgedDelaySeconds %v with %d permits for api-0, want %v and a share",
					d.UnacknowledgedDelaySeconds, d.For("api-0").Permits, tc.want)
			}
		})
	}
}

// TestSharedContractsDocumentsCarryItsDelay: the callers of a shared
// contract are told the contract's delay, which is what the handover of
// their pods counts with.
func TestSharedContractsDocumentsCarryItsDelay(t *testing.T) {
	dc := guardContract()
	dc.Spec.Handover.UnacknowledgedDelay = &metav1.Duration{Duration: 75 * time.Second}
	env := newFakeEnv(guardNamespace("shop", map[string]string{"team": "checkout"}), dc,
		guardDeployment("shop", "api", 1), guardPod("shop", "api", "api-0"), sharedQuota("shop", "payments", "api", 0))
	env.reconcileContract(t)
	cm := &corev1.ConfigMap{}
	if err := env.client.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "api-backpressure"}, cm); err != nil {
		t.Fatal(err)
	}
	d, err := plan.Parse([]byte(cm.Data[plan.KeyFor("payments")]))
	if err != nil {
		t.Fatal(err)
	}
	if d.UnacknowledgedDelaySeconds != 75 || d.For("api-0").Permits == 0 {
		t.Errorf("published unacknowledgedDelaySeconds %v with %d permits for api-0, want 75 and a share",
			d.UnacknowledgedDelaySeconds, d.For("api-0").Permits)
	}
}
