package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// buildStatus counts only the pods that have not finished, keeps the gone
// pods the division still counts, and says what each pod acknowledged.
func TestBuildStatusPods(t *testing.T) {
	const epoch = "e1"
	ack := func(v string) map[string]string { return map[string]string{"applied.backpressure.dev/q": v} }
	pod := func(name string, annotations map[string]string, phase corev1.PodPhase, ready bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Status: corev1.PodStatus{Phase: phase}}
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		return p
	}
	leaving := pod("e", ack(epoch+"/4"), corev1.PodRunning, true)
	leaving.DeletionTimestamp = &metav1.Time{}
	q := &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns"},
		Status: v1alpha1.DownstreamQuotaStatus{PodPermits: "0-2", Division: &v1alpha1.DivisionStatus{
			Epoch: epoch, Revision: 4, Usable: 10, Base: 2, Extra: 0, HandedOut: 8, Held: 10,
			Pods: []v1alpha1.PodShareStatus{{Name: "a", Permits: 2}, {Name: "e", Permits: 2}, {Name: "gone", Holds: new(int32(2))}},
		}},
	}
	v := buildStatus(quotaFacts{quota: q, pods: []corev1.Pod{
		pod("a", ack(epoch+"/4"), corev1.PodRunning, true),
		pod("b", ack(epoch+"/released"), corev1.PodRunning, true),
		pod("c", ack("e0/4"), corev1.PodRunning, false),
		pod("d", ack(epoch+"/4"), corev1.PodSucceeded, false),
		leaving,
		pod("f", ack("4"), corev1.PodPending, false),
	}})
	var got []string
	for _, p := range v.Pods {
		got = append(got, p.Name+": "+appliedText(p, v.Division))
	}
	want := []string{"a: yes", "b: no: released", "c: no: another epoch", "e: yes", `f: no: "4" is not <epoch>/<revision>`, "gone: gone"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if v.PodPermits != "0-2" {
		t.Errorf("podPermits %q, want status.podPermits, 0-2", v.PodPermits)
	}
	if v.Applied != 2 || v.Total != 5 || v.AllApplied {
		t.Errorf("applied %d of %d (all %v), want 2 of 5 and not all", v.Applied, v.Total, v.AllApplied)
	}
	if !v.Pods[3].Terminating || v.Pods[2].Ready || !v.Pods[0].Ready {
		t.Errorf("pods' state: %+v", v.Pods)
	}

	// Without a division nothing is applied, whatever the pods say.
	q.Status.Division = nil
	if v := buildStatus(quotaFacts{quota: q, pods: []corev1.Pod{pod("a", ack(epoch+"/4"), corev1.PodRunning, true)}}); v.Applied != 0 || v.AllApplied || appliedText(v.Pods[0], nil) != "no: no division yet" {
		t.Errorf("without a division: applied %d, all %v, %q", v.Applied, v.AllApplied, appliedText(v.Pods[0], nil))
	}
}

// The contract line states the quota's own contract with its cluster share,
// or the shared contract it names, read or not.
func TestContractLine(t *testing.T) {
	share := int32(20)
	own := &v1alpha1.DownstreamQuota{Spec: v1alpha1.DownstreamQuotaSpec{
		Contract:      &v1alpha1.Contract{Concurrency: 50, RatePerSecond: 100, Burst: 10, ClusterShare: &v1alpha1.ClusterShare{Concurrency: &share}},
		SafetyPercent: 90,
	}}
	shared := &v1alpha1.DownstreamQuota{Spec: v1alpha1.DownstreamQuotaSpec{ContractRef: &v1alpha1.ContractReference{Name: "logistics"}}}
	dc := &v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: "logistics"}, Spec: v1alpha1.DownstreamContractSpec{Contract: v1alpha1.Contract{Concurrency: 50}}}
	for _, tt := range []struct {
		q    *v1alpha1.DownstreamQuota
		dc   *v1alpha1.DownstreamContract
		want string
	}{
		// floor(20 × 90%) = 18.
		{own, nil, "20 of 50 in flight for this cluster × 90% safety = 18 permits; rate 100/s, burst 10"},
		// The contract's default safety, 80%: floor(50 × 80%) = 40.
		{shared, dc, "DownstreamContract logistics, shared: 50 in flight × 80% safety = 40 permits over its callers"},
		{shared, nil, "DownstreamContract logistics, shared (not readable here)"},
	} {
		if got := contractLine(contractOf(tt.q, tt.dc)); got != tt.want {
			t.Errorf("contract line:\n got %q\nwant %q", got, tt.want)
		}
	}
}

// The divisor line gives the HPA's desired count, but not the 0 an HPA
// that has never computed one reports (no metrics yet), below its own
// floor: that read as an HPA asking for no pod at all.
func TestDivisorLineHPADesired(t *testing.T) {
	r := func(desired *int32) *v1alpha1.ReplicaStatus {
		return &v1alpha1.ReplicaStatus{Spec: 8, HPAMin: new(int32(4)), HPAMax: new(int32(20)), HPADesired: desired,
			ExistingPods: 8, ReadyPods: 8, Divisor: 8, DivisorSource: v1alpha1.DivisorReadyPods}
	}
	for _, tt := range []struct {
		desired *int32
		want    string
	}{
		{new(int32(10)), "8, from ReadyPods (spec 8, HPA 4..20 desired 10, 8 pods exist, 8 Ready)"},
		{new(int32(0)), "8, from ReadyPods (spec 8, HPA 4..20, no desired count yet, 8 pods exist, 8 Ready)"},
		{nil, "8, from ReadyPods (spec 8, HPA 4..20, 8 pods exist, 8 Ready)"},
	} {
		if got := divisorLine(r(tt.desired)); got != tt.want {
			t.Errorf("divisorLine:\n got %s\nwant %s", got, tt.want)
		}
	}
}
