//go:build unix

package storm

import (
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
)

func TestSharedContractEvents(t *testing.T) {
	cs := SharedContractEvents()
	if err := cs.Validate(); err != nil {
		t.Fatal(err)
	}
	if cs.Callers[0].Namespace != "storm-events-search" || cs.Callers[1].Namespace != "storm-events-checkout" || cs.contract() == ContractName {
		t.Errorf("the scenario shares namespaces or its contract with the two-callers scenario: %+v", cs)
	}
	dc, err := contractObject(cs.contract(), cs.NamespaceLabels)
	if err != nil || dc.Spec.NamespaceSelector.MatchLabels[EventsNamespaceLabel] != "caller" {
		t.Errorf("contractObject() = %+v, %v: want a selector of %s", dc, err, EventsNamespaceLabel)
	}
	var sum int32
	for _, p := range EventsFinalParts() {
		sum += p
	}
	if sum != int32(Usable()) {
		t.Errorf("the final parts add up to %d, not %d", sum, Usable())
	}
}

func TestPeakTold(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	published := map[string][]observe.Published{
		"a": {{Seen: at(-1), Pods: map[string]int{"p": 30}}, {Seen: at(2), Pods: map[string]int{"p": 10}}},
		"b": {{Seen: at(1), Pods: map[string]int{"q": 10}}, {Seen: at(3), Pods: map[string]int{"q": 25}}, {Seen: at(9), Permits: 1}},
	}
	// At 1 s: 30 + 10; at 2 s: 10 + 10; at 3 s: 10 + 25; the last is after
	// the end.
	peak, when, unnamed := peakTold(published, start, at(5))
	if peak != 40 || when != 1 || unnamed != 1 {
		t.Errorf("peakTold() = %d at %v, %d unnamed; want 40 at 1, 1", peak, when, unnamed)
	}
	if n := lastPlanTotal(published["b"], []string{"q", "r"}, at(5)); n != 25 {
		t.Errorf("lastPlanTotal() = %d, want 25", n)
	}
	if n := lastPlanTotal(published["b"], []string{"q"}, at(0)); n != -1 {
		t.Errorf("lastPlanTotal() before any document = %d, want -1", n)
	}
}
