package controller

import (
	"strings"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
	"github.com/backpressure-dev/backpressure-operator/internal/testing/builders"
)

// designQuota is the logistics quota of docs/concepts.md's search gateway.
func designQuota() *v1alpha1.DownstreamQuota { return builders.DesignQuota().Obj() }

func TestCurrentDocument(t *testing.T) {
	q := designQuota()
	p, err := quota.Size(q.Spec, 8)
	if err != nil {
		t.Fatal(err)
	}
	doc := p.Document(q.Name, q.Spec.Downstream, q.Generation, quota.Shares{Epoch: "uid-1", Revision: 3, Pods: map[string]int{"gw-a": 5, "gw-b": 5}})
	data, err := plan.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	older := doc
	older.Generation = 1
	olderData, _ := plan.Marshal(older)
	other := doc
	other.Revision = 4
	other.Hash = plan.Hash(other)
	otherData, _ := plan.Marshal(other)

	tests := []struct {
		name string
		data string
		want bool
	}{
		{name: "the same document", data: string(data), want: true},
		{name: "the same plan from an older generation", data: string(olderData), want: true},
		{name: "another plan", data: string(otherData), want: false},
		{name: "edited by hand, hash kept", data: strings.Replace(string(data), `"permits":5`, `"permits":6`, 1), want: false},
		{name: "not a document", data: "permits: 5", want: false},
		{name: "absent", data: "", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := currentDocument(tt.data, doc.Hash); got != tt.want {
				t.Errorf("currentDocument = %v, want %v", got, tt.want)
			}
		})
	}
}
