package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

func TestChooseDivisor(t *testing.T) {
	tests := []struct {
		name        string
		spec        int32
		hpaDesired  *int32
		existing    int32
		wantDivisor int32
		wantSource  v1alpha1.DivisorSource
	}{
		{name: "steady", spec: 8, hpaDesired: ptr.To[int32](8), existing: 8, wantDivisor: 8, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "no HPA", spec: 3, existing: 3, wantDivisor: 3, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "scale-up: spec written first", spec: 16, hpaDesired: ptr.To[int32](8), existing: 8, wantDivisor: 16, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "HPA desired above spec", spec: 8, hpaDesired: ptr.To[int32](12), existing: 8, wantDivisor: 12, wantSource: v1alpha1.DivisorHPADesired},
		{name: "scale-down: pods still terminating", spec: 4, hpaDesired: ptr.To[int32](4), existing: 16, wantDivisor: 16, wantSource: v1alpha1.DivisorExistingPods},
		{name: "surge pods above spec", spec: 4, existing: 5, wantDivisor: 5, wantSource: v1alpha1.DivisorExistingPods},
		{name: "tie of HPA and pods goes to HPA", spec: 2, hpaDesired: ptr.To[int32](6), existing: 6, wantDivisor: 6, wantSource: v1alpha1.DivisorHPADesired},
		{name: "HPA without status", spec: 5, hpaDesired: ptr.To[int32](0), existing: 0, wantDivisor: 5, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "scaled to zero, no pods", spec: 0, hpaDesired: ptr.To[int32](0), existing: 0, wantDivisor: 1, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "scaled to zero, one pod leaving", spec: 0, existing: 1, wantDivisor: 1, wantSource: v1alpha1.DivisorWorkloadSpec},
		{name: "scaled to zero, pods leaving", spec: 0, existing: 3, wantDivisor: 3, wantSource: v1alpha1.DivisorExistingPods},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			divisor, source := chooseDivisor(tt.spec, tt.hpaDesired, tt.existing)
			if divisor != tt.wantDivisor || source != tt.wantSource {
				t.Errorf("chooseDivisor(%d, %v, %d) = %d, %s; want %d, %s",
					tt.spec, ptr.Deref(tt.hpaDesired, -1), tt.existing, divisor, source, tt.wantDivisor, tt.wantSource)
			}
		})
	}
}

// TestChooseDivisorBoundsEveryPod checks the property the divisor exists
// for: it is at least every count of pods that may hold a share, so
// dividing the contract by it never hands out more than the contract.
func TestChooseDivisorBoundsEveryPod(t *testing.T) {
	for spec := int32(0); spec <= 20; spec++ {
		for desired := int32(-1); desired <= 20; desired++ {
			for existing := int32(0); existing <= 20; existing++ {
				var hpa *int32
				if desired >= 0 {
					hpa = ptr.To(desired)
				}
				divisor, _ := chooseDivisor(spec, hpa, existing)
				if divisor < 1 || divisor < spec || divisor < existing || divisor < ptr.Deref(hpa, 0) {
					t.Fatalf("chooseDivisor(%d, %d, %d) = %d, below a fact", spec, desired, existing, divisor)
				}
				if divisor != max(spec, ptr.Deref(hpa, 0), existing, 1) {
					t.Fatalf("chooseDivisor(%d, %d, %d) = %d, not the largest fact", spec, desired, existing, divisor)
				}
			}
		}
	}
}

func TestReplicaStatus(t *testing.T) {
	w := &workloadFacts{specReplicas: 4, statusReplicas: 6, selector: labels.Everything()}
	h := &hpaFacts{name: "api", min: ptr.To[int32](2), max: 10, current: 6, desired: 4}
	got := replicaStatus(w, h, 7)
	want := v1alpha1.ReplicaStatus{
		Spec: 4, Status: 6,
		HPAMin: ptr.To[int32](2), HPAMax: ptr.To[int32](10), HPACurrent: ptr.To[int32](6), HPADesired: ptr.To[int32](4),
		ExistingPods: 7, Divisor: 7, DivisorSource: v1alpha1.DivisorExistingPods,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicaStatus (-want +got):\n%s", diff)
	}
	if got.HPAMin == h.min {
		t.Error("replicaStatus shares the HPA's pointer")
	}

	got = replicaStatus(w, nil, 0)
	want = v1alpha1.ReplicaStatus{Spec: 4, Status: 6, Divisor: 4, DivisorSource: v1alpha1.DivisorWorkloadSpec}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replicaStatus without HPA (-want +got):\n%s", diff)
	}
}
