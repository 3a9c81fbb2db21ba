package controller

import (
	"fmt"
	"math"
	"strconv"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// Event reasons and actions. Reasons of conditions double as event reasons
// for the findings that have one (ConfigMapConflict).
const (
	// EventReasonPlanChanged is a Normal event: the published plan changed.
	EventReasonPlanChanged = "PlanChanged"
	// EventActionPublish is the action of the controller's events.
	EventActionPublish = "Publish"
)

// planFigures are the numbers an event about a plan quotes.
type planFigures struct {
	permits int32
	divisor int32
	source  v1alpha1.DivisorSource
}

// planChange is a change of the published plan.
type planChange struct {
	// before is nil on the first publication.
	before        *planFigures
	after         planFigures
	concurrency   int32
	safetyPercent int32
	belowOne      v1alpha1.BelowOnePolicy
	configMap     string
	// hash is the published document's content hash.
	hash string
}

// since returns the change from the status prev had, or nil when prev
// already published this plan. The figures before are prev's when it
// published a plan.
func (c planChange) since(prev *v1alpha1.DownstreamQuotaStatus) *planChange {
	published := prev.ConfigMap
	if published != nil && published.Hash == c.hash && published.Name == c.configMap {
		return nil
	}
	c.before = nil
	if published != nil && prev.PerPod != nil && prev.Replicas != nil {
		c.before = &planFigures{permits: prev.PerPod.Permits, divisor: prev.Replicas.Divisor, source: prev.Replicas.DivisorSource}
	}
	return &c
}

// message states the change with its arithmetic, for example
// "permits 5→2: divisor 8→16 (HPA desired replicas); 50 × 80% / 16 = 2.5 per pod".
func (c planChange) message() string {
	a := c.after
	source := divisorSourceText(a.source)
	permits := fmt.Sprintf("permits %d", a.permits)
	divisor := fmt.Sprintf("divisor %d (%s)", a.divisor, source)
	if b := c.before; b != nil {
		if b.permits != a.permits {
			permits = fmt.Sprintf("permits %d→%d", b.permits, a.permits)
		} else {
			permits += " (unchanged)"
		}
		if b.divisor != a.divisor {
			divisor = fmt.Sprintf("divisor %d→%d (%s)", b.divisor, a.divisor, source)
		} else {
			divisor = fmt.Sprintf("divisor %d (%s, unchanged)", a.divisor, source)
		}
	}
	share := float64(c.concurrency) * float64(c.safetyPercent) / 100 / float64(a.divisor)
	msg := fmt.Sprintf("%s: %s; %d × %d%% / %d = %s per pod",
		permits, divisor, c.concurrency, c.safetyPercent, a.divisor, decimal(share))
	if share < 1 {
		if c.belowOne == v1alpha1.BelowOneAtLeastOne {
			msg += ", raised to 1 by AtLeastOne"
		} else {
			msg += ", 0 under Strict"
		}
	}
	if c.before == nil {
		msg += "; published to ConfigMap " + c.configMap
	}
	return msg
}

// decimal renders f cut to at most two decimals, without trailing zeros. It
// truncates rather than rounds, as permits do: 0.999 per pod is "0.99", not
// a misleading "1".
func decimal(f float64) string {
	s := strconv.FormatFloat(math.Floor(f*100)/100, 'f', 2, 64)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
