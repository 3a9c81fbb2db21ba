package controller

import (
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func TestPlanChangeMessage(t *testing.T) {
	base := planChange{concurrency: 50, safetyPercent: 80, belowOne: v1alpha1.BelowOneStrict, configMap: "gateway-backpressure"}
	with := func(before *planFigures, after planFigures, edit func(*planChange)) planChange {
		c := base
		c.before, c.after = before, after
		if edit != nil {
			edit(&c)
		}
		return c
	}
	tests := []struct {
		name   string
		change planChange
		want   string
	}{
		{
			name:   "first publication",
			change: with(nil, planFigures{5, 8, v1alpha1.DivisorWorkloadSpec}, nil),
			want:   "permits 5: divisor 8 (workload spec replicas); 50 × 80% / 8 = 5 per pod; published to ConfigMap gateway-backpressure",
		},
		{
			name:   "scale-up",
			change: with(&planFigures{5, 8, v1alpha1.DivisorWorkloadSpec}, planFigures{2, 16, v1alpha1.DivisorHPADesired}, nil),
			want:   "permits 5→2: divisor 8→16 (HPA desired replicas); 50 × 80% / 16 = 2.5 per pod",
		},
		{
			name:   "pods leaving",
			change: with(&planFigures{2, 14, v1alpha1.DivisorExistingPods}, planFigures{3, 13, v1alpha1.DivisorExistingPods}, nil),
			want:   "permits 2→3: divisor 14→13 (existing pods); 50 × 80% / 13 = 3.07 per pod",
		},
		{
			name:   "divisor moved, permits did not",
			change: with(&planFigures{4, 9, v1alpha1.DivisorWorkloadSpec}, planFigures{4, 10, v1alpha1.DivisorWorkloadSpec}, nil),
			want:   "permits 4 (unchanged): divisor 9→10 (workload spec replicas); 50 × 80% / 10 = 4 per pod",
		},
		{
			name:   "contract changed",
			change: with(&planFigures{5, 8, v1alpha1.DivisorWorkloadSpec}, planFigures{6, 8, v1alpha1.DivisorWorkloadSpec}, func(c *planChange) { c.concurrency = 60 }),
			want:   "permits 5→6: divisor 8 (workload spec replicas, unchanged); 60 × 80% / 8 = 6 per pod",
		},
		{
			name:   "strict below one",
			change: with(&planFigures{1, 40, v1alpha1.DivisorWorkloadSpec}, planFigures{0, 100, v1alpha1.DivisorWorkloadSpec}, nil),
			want:   "permits 1→0: divisor 40→100 (workload spec replicas); 50 × 80% / 100 = 0.4 per pod, 0 under Strict",
		},
		{
			name: "at least one",
			change: with(nil, planFigures{1, 100, v1alpha1.DivisorHPADesired}, func(c *planChange) {
				c.belowOne = v1alpha1.BelowOneAtLeastOne
			}),
			want: "permits 1: divisor 100 (HPA desired replicas); 50 × 80% / 100 = 0.4 per pod, raised to 1 by AtLeastOne; published to ConfigMap gateway-backpressure",
		},
		{
			name:   "a share just below one is not rounded up",
			change: with(nil, planFigures{0, 2003, v1alpha1.DivisorWorkloadSpec}, func(c *planChange) { c.concurrency, c.safetyPercent = 2000, 100 }),
			want:   "permits 0: divisor 2003 (workload spec replicas); 2000 × 100% / 2003 = 0.99 per pod, 0 under Strict; published to ConfigMap gateway-backpressure",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.change.message(); got != tt.want {
				t.Errorf("message()\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestPlanChangeSince(t *testing.T) {
	change := planChange{after: planFigures{2, 16, v1alpha1.DivisorWorkloadSpec}, configMap: "cm", hash: "new"}
	published := func(name, hash string) *v1alpha1.DownstreamQuotaStatus {
		return &v1alpha1.DownstreamQuotaStatus{
			ConfigMap: &v1alpha1.PublishedConfigMap{Name: name, Hash: hash},
			PerPod:    &v1alpha1.PerPodPlan{Permits: 5},
			Replicas:  &v1alpha1.ReplicaStatus{Divisor: 8, DivisorSource: v1alpha1.DivisorHPADesired},
		}
	}

	if got := change.since(published("cm", "new")); got != nil {
		t.Errorf("since(the same publication) = %+v, want nil", got)
	}
	got := change.since(published("cm", "old"))
	if got == nil || got.before == nil || *got.before != (planFigures{5, 8, v1alpha1.DivisorHPADesired}) {
		t.Errorf("since(an older publication) = %+v, want the figures before", got)
	}
	if got := change.since(published("other-cm", "new")); got == nil {
		t.Error("since(the same plan in another ConfigMap) = nil, want a change")
	}
	never := &v1alpha1.DownstreamQuotaStatus{PerPod: &v1alpha1.PerPodPlan{Permits: 5}, Replicas: &v1alpha1.ReplicaStatus{Divisor: 8}}
	if got := change.since(never); got == nil || got.before != nil {
		t.Errorf("since(a plan never published) = %+v, want a first publication", got)
	}
}
