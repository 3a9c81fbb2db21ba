package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

func TestGateFieldOwner(t *testing.T) {
	if got := gateFieldOwner("payments"); got != "backpressure-operator/payments" {
		t.Errorf("gateFieldOwner(payments) = %q", got)
	}
	long1 := strings.Repeat("a", 200) + "-one"
	long2 := strings.Repeat("a", 200) + "-two"
	o1, o2 := gateFieldOwner(long1), gateFieldOwner(long2)
	if len(o1) > maxFieldManager || len(o2) > maxFieldManager {
		t.Errorf("field managers of %d and %d characters, want at most %d", len(o1), len(o2), maxFieldManager)
	}
	if o1 == o2 {
		t.Errorf("two long quota names share the field manager %q", o1)
	}
	if o1 != gateFieldOwner(long1) {
		t.Error("gateFieldOwner is not stable")
	}
}

func TestNotOurs(t *testing.T) {
	cm := func(labels map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-backpressure", Labels: labels}}
	}
	tests := []struct {
		name string
		cm   *corev1.ConfigMap
		want string
	}{
		{name: "ours", cm: cm(configMapLabels("api"))},
		{name: "unlabelled", cm: cm(nil), want: "ConfigMap api-backpressure exists and is not managed by backpressure-operator (it lacks the label app.kubernetes.io/managed-by=backpressure-operator)"},
		{name: "managed by someone else", cm: cm(map[string]string{ManagedByLabel: "helm", v1alpha1.WorkloadLabel: "api"}), want: "ConfigMap api-backpressure exists and is not managed by backpressure-operator (it lacks the label app.kubernetes.io/managed-by=backpressure-operator)"},
		{name: "another workload's", cm: cm(configMapLabels("web")), want: `ConfigMap api-backpressure holds the gates of workload "web", not of "api"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := notOurs(tt.cm, "api"); got != tt.want {
				t.Errorf("notOurs = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestGatePublished(t *testing.T) {
	q := designQuota()
	q.UID = "uid-1"
	p, err := quota.Size(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	doc := p.Document(q.Name, q.Spec.Downstream, q.Generation, quota.Shares{Epoch: string(q.UID), Revision: 1, Pods: map[string]int{"api-0": 5}})
	data, err := plan.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	owned := []metav1.OwnerReference{{APIVersion: "backpressure.dev/v1alpha1", Kind: "DownstreamQuota", Name: q.Name, UID: "uid-1"}}
	cm := func(data map[string]string, owners []metav1.OwnerReference) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{OwnerReferences: owners}, Data: data}
	}
	if !gatePublished(cm(map[string]string{"logistics-api.json": string(data)}, owned), q, doc.Hash) {
		t.Error("the published gate is not recognised")
	}
	if gatePublished(cm(map[string]string{"logistics-api.json": string(data)}, nil), q, doc.Hash) {
		t.Error("a gate without the quota's owner reference counts as published")
	}
	recreated := append([]metav1.OwnerReference(nil), owned...)
	recreated[0].UID = "uid-0"
	if gatePublished(cm(map[string]string{"logistics-api.json": string(data)}, recreated), q, doc.Hash) {
		t.Error("a gate owned by an earlier quota of the same name counts as published")
	}
	if gatePublished(cm(map[string]string{"other.json": string(data)}, owned), q, doc.Hash) {
		t.Error("a gate under another key counts as published")
	}
	if gatePublished(cm(map[string]string{"logistics-api.json": string(data)}, owned), q, "another-hash") {
		t.Error("a gate of another plan counts as published")
	}
}

func TestWithoutGate(t *testing.T) {
	ref := func(kind, name string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "backpressure.dev/v1alpha1", Kind: kind, Name: name, UID: types.UID("uid-" + name)}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{ref("DownstreamQuota", "payments"), ref("DownstreamQuota", "search"), ref("Other", "payments")}},
		Data:       map[string]string{"payments.json": "{}", "search.json": "{}", "README": "x"},
	}
	before := cm.DeepCopy()

	got, changed := withoutGate(cm, "payments")
	if !changed {
		t.Error("removing a held gate reports no change")
	}
	want := before.DeepCopy()
	want.OwnerReferences = []metav1.OwnerReference{ref("DownstreamQuota", "search"), ref("Other", "payments")}
	delete(want.Data, "payments.json")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("withoutGate (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, cm); diff != "" {
		t.Errorf("withoutGate changed its input (-before +after):\n%s", diff)
	}
	if _, changed := withoutGate(got, "payments"); changed {
		t.Error("removing an absent gate reports a change")
	}
}
