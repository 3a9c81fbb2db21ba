package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// published is the sample quota after a reconcile: 50 × 80% over 8 pods,
// with more demand than the contract holds.
func published() *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "logistics-api", Generation: 3},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef:   v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "search-gateway"},
			Downstream:    "logistics.example.com",
			Contract:      &v1alpha1.Contract{Concurrency: 50},
			SafetyPercent: 80,
		},
		Status: v1alpha1.DownstreamQuotaStatus{
			ObservedGeneration: 3,
			Replicas:           &v1alpha1.ReplicaStatus{Spec: 8, ExistingPods: 8, Divisor: 8, DivisorSource: v1alpha1.DivisorWorkloadSpec},
			PerPod:             &v1alpha1.PerPodPlan{Permits: 5, QueueCapacity: 0},
			Division:           &v1alpha1.DivisionStatus{Usable: 40, HandedOut: 38, Held: 40},
			Diagnostics: []v1alpha1.Diagnostic{
				{Reason: "DemandExceedsQuota", Message: "demand 1900/s × typical latency 220ms = 418 calls in flight against 40 available"},
				{Reason: "WorstLatencyExceedsDeadline", Message: "worst latency 1.8s exceeds the deadline 300ms"},
				{Reason: "WorstLatencyExceedsDeadline", Message: "repeated"},
			},
			ConfigMap: &v1alpha1.PublishedConfigMap{Name: "search-gateway-backpressure", Key: "logistics-api.json", Hash: "abc"},
			Rollout:   &v1alpha1.RolloutStatus{Acknowledged: 6, Total: 8},
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonDemandExceedsQuota,
				LastTransitionTime: metav1.Now(),
			}},
		},
	}
}

// overcommitted is a quota whose AtLeastOne policy hands 12 pods one permit
// each against a contract of 4, with a spec change not yet reconciled.
func overcommitted() *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "payments", Name: "fraud-check", Generation: 2},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef:   v1alpha1.WorkloadReference{Kind: "StatefulSet", Name: "ledger"},
			Downstream:    "fraud.example.com",
			Contract:      &v1alpha1.Contract{Concurrency: 4},
			SafetyPercent: 100,
			BelowOne:      v1alpha1.BelowOneAtLeastOne,
			ConfigMapName: "ledger-limits",
		},
		Status: v1alpha1.DownstreamQuotaStatus{
			ObservedGeneration: 1,
			Replicas:           &v1alpha1.ReplicaStatus{Spec: 12, ExistingPods: 12, Divisor: 12, DivisorSource: v1alpha1.DivisorWorkloadSpec},
			PerPod:             &v1alpha1.PerPodPlan{Permits: 1, QueueCapacity: 2},
			Diagnostics:        []v1alpha1.Diagnostic{{Reason: "Overcommitted", Message: "overcommitted by 8"}},
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOvercommitted,
				LastTransitionTime: metav1.Now(),
			}},
		},
	}
}

// fresh is a quota the operator has not reconciled yet.
func fresh() *v1alpha1.DownstreamQuota {
	return &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "pricing", Generation: 1},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "search-gateway"},
			Downstream:  "pricing.internal",
			Contract:    &v1alpha1.Contract{Concurrency: 200},
		},
	}
}

func TestQuotaCollector(t *testing.T) {
	tests := []struct {
		name   string
		quotas []client.Object
		want   string
	}{{
		name: "no quotas",
		want: `
# HELP backpressure_quota_collector_up 1 when the last scrape listed the DownstreamQuotas, 0 when listing failed.
# TYPE backpressure_quota_collector_up gauge
backpressure_quota_collector_up 1
`,
	}, {
		name:   "published, unreconciled and overcommitted quotas",
		quotas: []client.Object{published(), fresh(), overcommitted()},
		want: `
# HELP backpressure_quota_collector_up 1 when the last scrape listed the DownstreamQuotas, 0 when listing failed.
# TYPE backpressure_quota_collector_up gauge
backpressure_quota_collector_up 1
# HELP backpressure_quota_condition The quota's status conditions, 1 for each, with its status and reason.
# TYPE backpressure_quota_condition gauge
backpressure_quota_condition{namespace="payments",quota="fraud-check",reason="Overcommitted",status="False",type="Ready"} 1
backpressure_quota_condition{namespace="shop",quota="logistics-api",reason="DemandExceedsQuota",status="True",type="Ready"} 1
# HELP backpressure_quota_contract_concurrency The downstream's global in-flight limit (spec.contract.concurrency).
# TYPE backpressure_quota_contract_concurrency gauge
backpressure_quota_contract_concurrency{namespace="payments",quota="fraud-check"} 4
backpressure_quota_contract_concurrency{namespace="shop",quota="logistics-api"} 50
backpressure_quota_contract_concurrency{namespace="shop",quota="pricing"} 200
# HELP backpressure_quota_diagnostic The findings of the quota's plan (status.diagnostics), 1 for each reason.
# TYPE backpressure_quota_diagnostic gauge
backpressure_quota_diagnostic{namespace="payments",quota="fraud-check",reason="Overcommitted"} 1
backpressure_quota_diagnostic{namespace="shop",quota="logistics-api",reason="DemandExceedsQuota"} 1
backpressure_quota_diagnostic{namespace="shop",quota="logistics-api",reason="WorstLatencyExceedsDeadline"} 1
# HELP backpressure_quota_divisor The number of pods the usable permits are divided over: the Ready pods that are not terminating (status.replicas.divisor).
# TYPE backpressure_quota_divisor gauge
backpressure_quota_divisor{namespace="payments",quota="fraud-check"} 12
backpressure_quota_divisor{namespace="shop",quota="logistics-api"} 8
# HELP backpressure_quota_info A DownstreamQuota, 1 for each, with the downstream it limits, the workload it is divided over and the ConfigMap it publishes to.
# TYPE backpressure_quota_info gauge
backpressure_quota_info{configmap="ledger-limits",downstream="fraud.example.com",namespace="payments",quota="fraud-check",workload="ledger",workload_kind="StatefulSet"} 1
backpressure_quota_info{configmap="search-gateway-backpressure",downstream="logistics.example.com",namespace="shop",quota="logistics-api",workload="search-gateway",workload_kind="Deployment"} 1
backpressure_quota_info{configmap="search-gateway-backpressure",downstream="pricing.internal",namespace="shop",quota="pricing",workload="search-gateway",workload_kind="Deployment"} 1
# HELP backpressure_quota_permits The base share of each Ready pod, in permits (status.perPod.permits); status.division.extra pods hold one more.
# TYPE backpressure_quota_permits gauge
backpressure_quota_permits{namespace="payments",quota="fraud-check"} 1
backpressure_quota_permits{namespace="shop",quota="logistics-api"} 5
# HELP backpressure_quota_permits_handed_out The permits the published plan gives the pods (status.division.handedOut).
# TYPE backpressure_quota_permits_handed_out gauge
backpressure_quota_permits_handed_out{namespace="shop",quota="logistics-api"} 38
# HELP backpressure_quota_permits_held Σ over pods of the larger of what each is told and what it may still hold (status.division.held).
# TYPE backpressure_quota_permits_held gauge
backpressure_quota_permits_held{namespace="shop",quota="logistics-api"} 40
# HELP backpressure_quota_permits_usable The permits the quota hands out once the handover is done (status.division.usable).
# TYPE backpressure_quota_permits_usable gauge
backpressure_quota_permits_usable{namespace="shop",quota="logistics-api"} 40
# HELP backpressure_quota_queue_capacity Each pod's waiting room size in the published plan (status.perPod.queueCapacity).
# TYPE backpressure_quota_queue_capacity gauge
backpressure_quota_queue_capacity{namespace="payments",quota="fraud-check"} 2
backpressure_quota_queue_capacity{namespace="shop",quota="logistics-api"} 0
# HELP backpressure_quota_ready 1 when the quota's Ready condition is True, else 0.
# TYPE backpressure_quota_ready gauge
backpressure_quota_ready{namespace="payments",quota="fraud-check"} 0
backpressure_quota_ready{namespace="shop",quota="logistics-api"} 1
backpressure_quota_ready{namespace="shop",quota="pricing"} 0
# HELP backpressure_quota_rollout_acknowledged_pods The workload's pods whose applied.backpressure.dev annotation acknowledges the published revision (status.rollout.acknowledged).
# TYPE backpressure_quota_rollout_acknowledged_pods gauge
backpressure_quota_rollout_acknowledged_pods{namespace="shop",quota="logistics-api"} 6
# HELP backpressure_quota_rollout_pods The workload's existing pods (status.rollout.total).
# TYPE backpressure_quota_rollout_pods gauge
backpressure_quota_rollout_pods{namespace="shop",quota="logistics-api"} 8
# HELP backpressure_quota_safety_ratio The part of the contract handed out to pods (spec.safetyPercent / 100).
# TYPE backpressure_quota_safety_ratio gauge
backpressure_quota_safety_ratio{namespace="payments",quota="fraud-check"} 1
backpressure_quota_safety_ratio{namespace="shop",quota="logistics-api"} 0.8
# HELP backpressure_quota_status_stale 1 while the status describes an older spec than the current one (status.observedGeneration < metadata.generation), else 0.
# TYPE backpressure_quota_status_stale gauge
backpressure_quota_status_stale{namespace="payments",quota="fraud-check"} 1
backpressure_quota_status_stale{namespace="shop",quota="logistics-api"} 0
backpressure_quota_status_stale{namespace="shop",quota="pricing"} 1
`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tt.quotas...).WithStatusSubresource(&v1alpha1.DownstreamQuota{}).Build()
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(NewQuotaCollector(c)); err != nil {
				t.Fatal(err)
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tt.want)); err != nil {
				t.Error(err)
			}
		})
	}
}

// A quota's series go with the quota: nothing is remembered between
// scrapes.
func TestQuotaCollectorForgetsDeletedQuotas(t *testing.T) {
	q := published()
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(q).Build()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewQuotaCollector(c)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "backpressure_quota_permits"); err != nil || n != 1 {
		t.Fatalf("backpressure_quota_permits before the delete: %d series, err %v; want 1", n, err)
	}
	if err := c.Delete(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "backpressure_quota_permits", "backpressure_quota_info"); err != nil || n != 0 {
		t.Fatalf("backpressure_quota_{permits,info} after the delete: %d series, err %v; want 0", n, err)
	}
}

// A failed list shows as collector_up 0 without failing the scrape, which
// also serves the manager's other metrics.
func TestQuotaCollectorListError(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(published()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("cache not started")
		},
	}).Build()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewQuotaCollector(c)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP backpressure_quota_collector_up 1 when the last scrape listed the DownstreamQuotas, 0 when listing failed.
# TYPE backpressure_quota_collector_up gauge
backpressure_quota_collector_up 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A list that does not answer (an informer still syncing) ends at the
// collector's list timeout, and the scrape reports collector_up 0 instead
// of hanging.
func TestQuotaCollectorListTimeout(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(published()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, _ client.WithWatch, _ client.ObjectList, _ ...client.ListOption) error {
			<-ctx.Done()
			return ctx.Err()
		},
	}).Build()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewQuotaCollector(c, withListTimeout(10*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP backpressure_quota_collector_up 1 when the last scrape listed the DownstreamQuotas, 0 when listing failed.
# TYPE backpressure_quota_collector_up gauge
backpressure_quota_collector_up 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// A replica that does not lead exports nothing; it starts when elected.
func TestQuotaCollectorExportsOnlyWhenElected(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(published()).Build()
	elected := make(chan struct{})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewQuotaCollector(c, WithElected(elected))); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("before the election: %d series, err %v; want 0", n, err)
	}
	close(elected)
	if n, err := testutil.GatherAndCount(reg, "backpressure_quota_permits"); err != nil || n != 1 {
		t.Fatalf("backpressure_quota_permits after the election: %d series, err %v; want 1", n, err)
	}
}
