package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func TestReadyCondition(t *testing.T) {
	workload := v1alpha1.WorkloadReference{Kind: "Deployment", Name: "gateway"}
	published := &v1alpha1.PublishedConfigMap{Name: "gateway-backpressure", Key: "logistics.json", Hash: "h"}
	replicas := &v1alpha1.ReplicaStatus{Divisor: 8, DivisorSource: v1alpha1.DivisorWorkloadSpec}
	diag := func(reason string) v1alpha1.Diagnostic {
		return v1alpha1.Diagnostic{Reason: reason, Message: reason + " because of numbers"}
	}
	planned := func(diags ...v1alpha1.Diagnostic) readiness {
		return readiness{workload: workload, published: published, replicas: replicas, permits: 5, diagnostics: diags}
	}
	const summary = "permits 5 per pod over divisor 8 (WorkloadSpec), published to ConfigMap gateway-backpressure"

	tests := []struct {
		name string
		in   readiness
		want metav1.Condition
	}{
		{
			name: "nothing to report",
			in:   planned(),
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished, Message: "Permits 5 per pod over divisor 8 (WorkloadSpec), published to ConfigMap gateway-backpressure"},
		},
		{
			name: "workload missing, never published",
			in:   readiness{workload: workload, workloadMissing: true},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkloadNotFound, Message: "Deployment gateway not found; a plan is published once it exists"},
		},
		{
			name: "workload missing after a publication",
			in:   readiness{workload: workload, workloadMissing: true, published: published},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkloadNotFound, Message: "Deployment gateway not found; a plan is published once it exists; the last plan stays in ConfigMap gateway-backpressure"},
		},
		{
			name: "invalid spec",
			in:   readiness{workload: workload, invalid: errors.New("plan: gate: must be at most 248 characters")},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidSpec, Message: "plan: gate: must be at most 248 characters; no plan computed"},
		},
		{
			name: "conflict beats plan findings",
			in: func() readiness {
				in := planned(diag(v1alpha1.ReasonQuotaTooSmall))
				in.conflict, in.published = "ConfigMap gateway-backpressure exists and is not managed by backpressure-operator", nil
				return in
			}(),
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonConfigMapConflict,
				Message: "ConfigMap gateway-backpressure exists and is not managed by backpressure-operator; it was left untouched and the plan is not published"},
		},
		{
			name: "missing HPA beats plan findings",
			in: func() readiness {
				in := planned(diag(v1alpha1.ReasonDemandExceedsQuota))
				in.missingHPA = "gateway"
				return in
			}(),
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonHPANotFound,
				Message: "HorizontalPodAutoscaler gateway not found; " + summary + "; other findings: DemandExceedsQuota (see status.diagnostics)"},
		},
		{
			name: "quota too small",
			in:   planned(diag(v1alpha1.ReasonQuotaTooSmall)),
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonQuotaTooSmall, Message: "QuotaTooSmall because of numbers; " + summary},
		},
		{
			name: "overcommitted before deadline, findings in their order",
			in:   planned(diag(v1alpha1.ReasonDeadlineBelowLatency), diag(v1alpha1.ReasonOvercommitted), diag("RetriesWithoutBudget")),
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonOvercommitted,
				Message: "Overcommitted because of numbers; " + summary + "; other findings: DeadlineBelowLatency, RetriesWithoutBudget (see status.diagnostics)"},
		},
		{
			name: "deadline below latency",
			in:   planned(diag(v1alpha1.ReasonDeadlineBelowLatency)),
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDeadlineBelowLatency, Message: "DeadlineBelowLatency because of numbers; " + summary},
		},
		{
			name: "demand beyond the quota keeps Ready",
			in:   planned(diag("QueueWaitClamped"), diag(v1alpha1.ReasonDemandExceedsQuota)),
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonDemandExceedsQuota,
				Message: "DemandExceedsQuota because of numbers; " + summary + "; other findings: QueueWaitClamped (see status.diagnostics)"},
		},
		{
			name: "other findings keep PlanPublished",
			in:   planned(diag("RetriesWithoutBudget"), diag("RetriesWithoutBudget")),
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished,
				Message: "Permits 5 per pod over divisor 8 (WorkloadSpec), published to ConfigMap gateway-backpressure; other findings: RetriesWithoutBudget (see status.diagnostics)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Type = v1alpha1.ConditionReady
			if diff := cmp.Diff(tt.want, readyCondition(tt.in)); diff != "" {
				t.Errorf("readyCondition (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetConditionKeepsTransitionTime(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 500, time.UTC)
	var conds []metav1.Condition
	notReady := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonWorkloadNotFound, Message: "a"}
	setCondition(&conds, notReady, 1, t0)
	if got := conds[0].LastTransitionTime.Time; !got.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("transition time %v, want %v cut to seconds", got, t0)
	}

	notReady.Message = "b"
	setCondition(&conds, notReady, 2, t0.Add(time.Minute))
	if got := conds[0]; !got.LastTransitionTime.Time.Equal(t0.Truncate(time.Second)) || got.Message != "b" || got.ObservedGeneration != 2 {
		t.Errorf("same status: got %+v, want the first transition time with the new message and generation", got)
	}

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPlanPublished}
	setCondition(&conds, ready, 2, t0.Add(2*time.Minute))
	if got := conds[0].LastTransitionTime.Time; !got.Equal(t0.Add(2 * time.Minute).Truncate(time.Second)) {
		t.Errorf("flipped status: transition time %v, want the new time", got)
	}
}
