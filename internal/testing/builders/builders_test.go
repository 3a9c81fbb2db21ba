package builders_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// DesignQuota is docs/concepts.md's logistics quota, field by field.
func TestDesignQuota(t *testing.T) {
	want := &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "logistics-api", Namespace: "shop", Generation: 3},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef:    v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "search-gateway"},
			Downstream:     "logistics.example.com",
			Contract:       &v1alpha1.Contract{Concurrency: 50},
			Latency:        v1alpha1.Latency{Typical: metav1.Duration{Duration: 220 * time.Millisecond}},
			Deadline:       metav1.Duration{Duration: 2 * time.Second},
			MaxQueueWait:   &metav1.Duration{Duration: 100 * time.Millisecond},
			AcquireTimeout: &metav1.Duration{Duration: 200 * time.Millisecond},
			SafetyPercent:  80,
			BelowOne:       v1alpha1.BelowOneStrict,
			Demand:         &v1alpha1.Demand{RatePerSecond: 1900},
			Retry:          v1alpha1.RetryPolicy{MaxRetries: 1, BudgetPerSecond: 10},
		},
	}
	if diff := cmp.Diff(want, builders.DesignQuota().Obj()); diff != "" {
		t.Errorf("DesignQuota (-want +got):\n%s", diff)
	}
}

// A wrapper goes on building after Obj without changing what Obj returned.
func TestObjIsACopy(t *testing.T) {
	w := builders.MakeQuota("ns", "q").DemandInFlight(4)
	first := w.Obj()
	w.DemandInFlight(8).ContractRef("shared", 3)
	if *first.Spec.Demand.InFlight != 4 || first.Spec.Contract == nil || first.Spec.ContractRef != nil {
		t.Errorf("the first quota changed: %+v", first.Spec)
	}
	if second := w.Obj(); *second.Spec.Demand.InFlight != 8 || second.Spec.Contract != nil || second.Spec.ContractRef.Name != "shared" || second.Spec.Weight != 3 {
		t.Errorf("the second quota: %+v", second.Spec)
	}
	pod := builders.MakePod("ns", "p").Of("api").Obj()
	if pod.Labels[builders.AppLabel] != "api" || pod.Status.Phase != "" {
		t.Errorf("MakePod(...).Of(api) = %+v", pod)
	}
}

// Every builder's object, with its defaults and with each setter used, is
// one the API server accepts: the CRDs' schemas and validation rules, and
// the built-in kinds' validation.
func TestTheAPIServerAcceptsWhatTheBuildersBuild(t *testing.T) {
	_, cfg := testenv.Start(t)
	k8s := testenv.NewClient(t, cfg)
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []client.Object{
		builders.MakeDeployment("shop", "search-gateway").Replicas(3).Obj(),
		builders.MakeStatefulSet("shop", "ledger").Replicas(2).Obj(),
		builders.MakeHPA("shop", "search-gateway").Replicas(2, 10).Obj(),
		builders.MakeHPA("shop", "ledger").Target("StatefulSet", "ledger").Obj(),
		builders.MakePod("shop", "search-gateway-0").Of("search-gateway").Annotation("a", "b").Finalizers("test.backpressure.dev/hold").Obj(),
		builders.DesignQuota().Obj(),
		builders.MakeQuota("shop", "ledger").Workload("StatefulSet", "ledger").HPA("ledger").ConfigMap("ledger-ledger-backpressure").
			Queue(50*time.Millisecond, 50*time.Millisecond).DemandInFlight(12).UID("ignored").Obj(),
		builders.MakeQuota("shop", "shared").ContractRef("logistics", 3).Downstream("logistics.example.com").Obj(),
		builders.MakeContract("logistics").Downstream("logistics.example.com").Concurrency(40).Safety(90).Obj(),
	} {
		obj.SetUID("")
		if err := k8s.Create(ctx, obj); err != nil {
			t.Errorf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
}
