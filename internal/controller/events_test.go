package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

func TestPlanChangeMessage(t *testing.T) {
	ready := v1alpha1.DivisorReadyPods
	fig := func(permits, extra, usable, divisor int32) planFigures {
		return planFigures{permits: permits, extra: extra, usable: usable, divisor: divisor, source: ready}
	}
	tests := []struct {
		name   string
		change planChange
		want   string
	}{
		{
			name:   "first publication",
			change: planChange{after: fig(5, 0, 40, 8), configMap: "gw-backpressure"},
			want:   "permits 5 per pod: Ready pods 8; 40 usable permits = 5 × 8 + 0; published to ConfigMap gw-backpressure",
		},
		{
			name:   "one more Ready pod",
			change: planChange{before: ptrTo(fig(5, 0, 40, 8)), after: fig(4, 4, 40, 9), configMap: "cm"},
			want:   "permits 5→4 per pod, 5 for 4 of them: Ready pods 8→9; 40 usable permits = 4 × 9 + 4",
		},
		{
			name:   "strict below one: 40 of 100 pods hold one",
			change: planChange{before: ptrTo(fig(1, 0, 40, 40)), after: fig(0, 40, 40, 100), configMap: "cm"},
			want:   "permits 1→0 per pod, 1 for 40 of them: Ready pods 40→100; 40 usable permits = 0 × 100 + 40",
		},
		{
			name:   "at least one",
			change: planChange{after: fig(1, 0, 40, 100), configMap: "cm"},
			want:   "permits 1 per pod: Ready pods 100; 40 usable permits / 100 = 0.4 per pod, raised to 1 by AtLeastOne; published to ConfigMap cm",
		},
		{
			name:   "no Ready pod",
			change: planChange{before: ptrTo(fig(40, 0, 40, 1)), after: fig(40, 0, 40, 0), configMap: "cm"},
			want:   "permits 40 per pod: Ready pods 1→0; 40 usable permits, no Ready pod to hold them",
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
	after := planFigures{permits: 4, extra: 4, usable: 40, divisor: 9, source: v1alpha1.DivisorReadyPods}
	change := planChange{after: after, configMap: "cm"}
	published := func(name string, permits, divisor int32) *v1alpha1.DownstreamQuotaStatus {
		return &v1alpha1.DownstreamQuotaStatus{
			ConfigMap: &v1alpha1.PublishedConfigMap{Name: name},
			PerPod:    &v1alpha1.PerPodPlan{Permits: permits},
			Replicas:  &v1alpha1.ReplicaStatus{Divisor: divisor, DivisorSource: v1alpha1.DivisorReadyPods},
			Division:  &v1alpha1.DivisionStatus{Usable: 40, Extra: 40 % divisor},
		}
	}
	if got := change.since(published("cm", 4, 9)); got != nil {
		t.Errorf("since(the same arithmetic) = %+v, want nil", got)
	}
	got := change.since(published("cm", 5, 8))
	if got == nil || got.before == nil || got.before.permits != 5 || got.before.divisor != 8 {
		t.Errorf("since(an older division) = %+v, want the figures before", got)
	}
	if got := change.since(published("other-cm", 4, 9)); got == nil {
		t.Error("since(the same division in another ConfigMap) = nil, want a change")
	}
	never := &v1alpha1.DownstreamQuotaStatus{PerPod: &v1alpha1.PerPodPlan{Permits: 5}, Replicas: &v1alpha1.ReplicaStatus{Divisor: 8}}
	if got := change.since(never); got == nil || got.before != nil {
		t.Errorf("since(a plan never published) = %+v, want a first publication", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

// An event states the division in sizing's words, as the status and
// kubectl-backpressure do: for a set of quotas and Ready pod counts, the
// message built from the plan's figures (as publishPlan builds it) carries
// the plan's own Division().Equation().
func TestPlanChangeQuotesSizing(t *testing.T) {
	for _, tt := range []struct {
		concurrency, ready int32
		belowOne           v1alpha1.BelowOnePolicy
		want               string
	}{
		{50, 8, v1alpha1.BelowOneStrict, "40 usable permits = 5 × 8 + 0"},
		{50, 9, v1alpha1.BelowOneStrict, "40 usable permits = 4 × 9 + 4"},
		{50, 100, v1alpha1.BelowOneStrict, "40 usable permits = 0 × 100 + 40"},
		{50, 45, v1alpha1.BelowOneAtLeastOne, "40 usable permits / 45 = 0.88 per pod, raised to 1 by AtLeastOne"},
		{1, 3, v1alpha1.BelowOneAtLeastOne, "0 usable permits / 3 = 0 per pod, raised to 1 by AtLeastOne"},
	} {
		spec := v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "gw"},
			Downstream:  "d.example.com",
			Contract:    &v1alpha1.Contract{Concurrency: tt.concurrency},
			Latency:     v1alpha1.Latency{Typical: metav1.Duration{Duration: 220 * time.Millisecond}},
			Deadline:    metav1.Duration{Duration: time.Second},
			BelowOne:    tt.belowOne,
		}
		p, err := quota.Size(spec, tt.ready)
		if err != nil {
			t.Fatal(err)
		}
		c := planChange{after: planFigures{
			permits: int32(p.Result.Base), extra: int32(p.Result.Extra), usable: int32(p.Result.Usable),
			divisor: tt.ready, source: v1alpha1.DivisorReadyPods,
		}, configMap: "cm"}
		eq := p.Result.Division(int(tt.ready)).Equation()
		if eq != tt.want {
			t.Errorf("%d over %d (%s): sizing says %q, want %q", tt.concurrency, tt.ready, tt.belowOne, eq, tt.want)
		}
		if msg := c.message(); !strings.Contains(msg, "; "+eq+"; published") {
			t.Errorf("%d over %d (%s): event %q does not quote sizing's %q", tt.concurrency, tt.ready, tt.belowOne, msg, eq)
		}
	}
}
