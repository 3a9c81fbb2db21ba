package runtime

import (
	"github.com/backpressure-dev/backpressure-operator/internal/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/dispatch"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
)

// GateLimits, DispatchLimits and PlanOf let the external tests state what a
// document becomes.
func GateLimits(d plan.Document) gate.Limits { return gateLimits(d) }

// DispatchLimits is dispatchLimits.
func DispatchLimits(d plan.Document) dispatch.Limits { return dispatchLimits(d) }

// PlanOf is planOf.
func PlanOf(d plan.Document) Plan { return planOf(d) }
