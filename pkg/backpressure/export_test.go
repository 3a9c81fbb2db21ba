package backpressure

import (
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// GateLimits, DispatchLimits and ShareOf let the external tests state what a
// document becomes.
func GateLimits(d plan.Document) gate.Limits { return gateLimits(d) }

// DispatchLimits is dispatchLimits.
func DispatchLimits(d plan.Document) dispatch.Limits { return dispatchLimits(d) }

// ShareOf is shareOf.
func ShareOf(d plan.Document) Share { return shareOf(d) }

// CheckLapses is checkLapses: it lapses and restores gates as a source that
// knows when it is current would make it, at the moments a test chooses.
func (r *Runtime) CheckLapses(now time.Time, live bool, at time.Time) { r.checkLapses(now, live, at) }
