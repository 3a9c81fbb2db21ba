package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// scriptedDemand answers each read with the next of its readings.
type scriptedDemand struct{ readings []map[string]int64 }

func (s *scriptedDemand) Read(context.Context, string, labels.Selector, string) (map[string]int64, error) {
	next := s.readings[0]
	s.readings = s.readings[1:]
	return next, nil
}

// A pod's demand rises at once and falls only on the second low reading in
// a row: one quiet reading moves no share down and up again.
func TestDemandFallsOnlyOnTwoReadingsInARow(t *testing.T) {
	src := &scriptedDemand{readings: []map[string]int64{
		{"a": 3, "b": 3},
		{"a": 1, "b": 5}, // a reads low once, b rises
		{"a": 3, "b": 5}, // a is back: it never fell
		{"a": 1, "b": 2}, // a and b low once
		{"a": 1, "b": 2}, // and again: now they fall
	}}
	r := &demandReads{source: src, interval: 15 * time.Second}
	q := &v1alpha1.DownstreamQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "logistics"}}
	start := time.Unix(1000, 0)
	want := []map[string]int64{
		{"a": 3, "b": 3},
		{"a": 3, "b": 5},
		{"a": 3, "b": 5},
		{"a": 3, "b": 5},
		{"a": 1, "b": 2},
	}
	for i, w := range want {
		got, _, err := r.read(context.Background(), q, labels.Everything(), "m", start.Add(time.Duration(i)*r.interval))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("reading %d (-want +got):\n%s", i, diff)
		}
	}
	// A reading more than two intervals after the last is followed as it
	// is: the old one says nothing of now.
	src.readings = []map[string]int64{{"a": 0, "b": 0}}
	got, _, _ := r.read(context.Background(), q, labels.Everything(), "m", start.Add(8*r.interval))
	if diff := cmp.Diff(map[string]int64{"a": 0, "b": 0}, got); diff != "" {
		t.Errorf("after a gap (-want +got):\n%s", diff)
	}
}
