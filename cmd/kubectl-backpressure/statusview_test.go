package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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

// A quota with a reserve shows where it went: a reserve line, and the
// broker's replicas in a table of their own, with their slices and
// handover, never among the workload's pods (not even a replica that is
// gone); -o json carries it.
func TestBuildStatusReserve(t *testing.T) {
	const epoch = "e1"
	ack := func(v string) map[string]string {
		return map[string]string{"applied.backpressure.dev/logistics-api": v}
	}
	pod := func(name string, annotations map[string]string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Status: corev1.PodStatus{
			Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	q := &v1alpha1.DownstreamQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "logistics-api", Namespace: "shop"},
		Spec: v1alpha1.DownstreamQuotaSpec{
			WorkloadRef: v1alpha1.WorkloadReference{Kind: "Deployment", Name: "search-gateway"}, Downstream: "logistics.example.com",
			Contract: &v1alpha1.Contract{Concurrency: 50}, SafetyPercent: 80,
			Reserve: &v1alpha1.Reserve{Permits: intstr.FromString("20%"), BrokerRef: v1alpha1.BrokerReference{Name: "broker"}},
		},
		Status: v1alpha1.DownstreamQuotaStatus{
			Division: &v1alpha1.DivisionStatus{Epoch: epoch, Revision: 5, Usable: 40, Base: 16, HandedOut: 36, Held: 40, Pods: []v1alpha1.PodShareStatus{
				{Name: "gw-a", Permits: 16}, {Name: "gw-b", Permits: 16},
				{Name: "broker-x", Permits: 4}, {Name: "broker-y", Permits: 0, Target: new(int32(4))}, {Name: "broker-z", Holds: new(int32(4))},
			}},
			Reserve: &v1alpha1.ReserveStatus{Broker: "broker", Requested: 8, Permits: 8, HandedOut: 4, Replicas: []v1alpha1.PodShareStatus{
				{Name: "broker-x", Permits: 4}, {Name: "broker-y", Permits: 0, Target: new(int32(4))}, {Name: "broker-z", Holds: new(int32(4))},
			}},
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReserved, Status: metav1.ConditionFalse, Reason: "HandoverInProgress",
				Message: "4 of 8 permits handed out"}},
		},
	}
	v := buildStatus(quotaFacts{quota: q,
		pods:       []corev1.Pod{pod("gw-a", ack(epoch+"/5")), pod("gw-b", ack(epoch+"/5"))},
		brokerPods: []corev1.Pod{pod("broker-x", ack(epoch+"/5")), pod("broker-y", nil)},
	})
	var out strings.Builder
	if err := writeStatus(&out, v); err != nil {
		t.Fatal(err)
	}
	want := `shop/logistics-api → logistics.example.com, for the pods of Deployment/search-gateway
  contract  50 in flight × 80% safety = 40 permits
  divisor   none yet: the operator has not reconciled the quota
  division  revision 5: 40 usable = base 16, 0 pods at base+1; 36 handed out, 40 held
  applied   every pod, 2 of 2, applied revision 5
  reserve   4 of 8 permits handed out to 1 replica of Deployment broker; Reserved False HandoverInProgress: 4 of 8 permits handed out
  ready     no condition yet: the operator has not reconciled the quota

POD   READY  PERMITS  TARGET  HOLDS  APPLIED
gw-a  yes    16       -       -      yes
gw-b  yes    16       -       -      yes

REPLICA   READY  PERMITS  TARGET  HOLDS  APPLIED
broker-x  yes    4        -       -      yes
broker-y  yes    0        4       -      no: nothing acknowledged
broker-z  -      0        -       4      gone

No diagnostics.
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Reserve struct {
			Broker    string `json:"broker"`
			Requested int32  `json:"requested"`
			Permits   int32  `json:"permits"`
			HandedOut int32  `json:"handedOut"`
			Replicas  []struct {
				Name    string `json:"name"`
				Permits int32  `json:"permits"`
				Target  *int32 `json:"target"`
				Applied bool   `json:"applied"`
			} `json:"replicas"`
			Reserved struct {
				Reason string `json:"reason"`
			} `json:"reserved"`
		} `json:"reserve"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	r := got.Reserve
	if r.Broker != "broker" || r.Requested != 8 || r.Permits != 8 || r.HandedOut != 4 || len(r.Replicas) != 3 ||
		r.Replicas[0].Name != "broker-x" || !r.Replicas[0].Applied || r.Replicas[1].Target == nil || *r.Replicas[1].Target != 4 ||
		r.Reserved.Reason != "HandoverInProgress" {
		t.Errorf("-o json's reserve: %s", data)
	}

	// Without a reserve there is no reserve line, table or field.
	q.Spec.Reserve, q.Status.Reserve = nil, nil
	out.Reset()
	v = buildStatus(quotaFacts{quota: q, pods: []corev1.Pod{pod("gw-a", nil)}})
	if err := writeStatus(&out, v); err != nil {
		t.Fatal(err)
	}
	if data, _ := json.Marshal(v); strings.Contains(out.String(), "reserve") || strings.Contains(out.String(), "REPLICA") || strings.Contains(string(data), `"reserve"`) {
		t.Errorf("a quota without a reserve shows one:\n%s\n%s", out.String(), data)
	}
}
