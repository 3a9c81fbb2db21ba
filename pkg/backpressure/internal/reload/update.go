package reload

import (
	"maps"
	"slices"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// Update is what a source delivers: the plans in force for one workload's
// gates after a change.
type Update struct {
	// Plans holds the plan in force for every gate the source has read a
	// valid document for since it started, orphaned gates included, keyed
	// by gate name. The map belongs to the subscriber.
	Plans map[string]plan.Document
	// Changed lists, sorted, the gates whose plan is new in this update;
	// the first update of a source lists every gate.
	Changed []string
	// Orphaned lists, sorted, the gates whose document has disappeared from
	// the source. They keep their last plan until the process restarts.
	Orphaned []string
}

// Subscriber receives a source's updates, one at a time, in order, on the
// source's goroutine. It should apply the plans before it returns: a
// source acknowledges a plan only after its subscriber has returned, and
// does not read the next change until then.
type Subscriber func(Update)

func (u Update) clone() Update {
	return Update{
		Plans:    maps.Clone(u.Plans),
		Changed:  slices.Clone(u.Changed),
		Orphaned: slices.Clone(u.Orphaned),
	}
}
