package storm

import (
	"fmt"
	"strconv"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// Variant is one way of configuring the pods' gates, run on the same
// scenario as the others.
type Variant struct {
	// Name is the variant's key in the report.
	Name string
	// Description says what it stands for.
	Description string
	// Operator variants apply the quota; the pods read their plan from the
	// operator's ConfigMap through the API and acknowledge it.
	Operator bool
	// Plan is the fixed plan of a variant without the operator, mounted as
	// a directory.
	Plan *plan.Document
	// Laggard, when positive, makes the first pod started apply every new
	// plan that much later (test/e2e/storm/laggardpod --apply-delay), as a
	// pod whose reload is slow: a mounted ConfigMap the kubelet refreshes
	// late, a paused or CPU-starved process, a lost watch. It needs the
	// operator: the laggard follows the published ConfigMap.
	Laggard time.Duration
	// Schedule, when set, is the variant's own scenario: it runs on it
	// instead of the common schedule, and is reported apart.
	Schedule *schedule.Schedule
	// Sidecar variants run every pod as examples/gateway without a gate of
	// its own in front of backpressure-proxy, which enforces the pod's
	// share instead of the library (see proxypod).
	Sidecar bool
	// Events happen at their offsets while the schedule runs: the faults
	// of faults.go, and their measurements.
	Events []Event
	// Goals judge the variant's run, besides the figure of the load every
	// run reports; nil for none.
	Goals func(*report.VariantReport) report.Goals
	// Kind is the calling workload's kind: cluster.KindDeployment (when empty) or
	// cluster.KindStatefulSet, which needs a schedule with scale steps of its own
	// (see VariantManifests).
	Kind string
}

// ScheduleOr returns the variant's own schedule, or common.
func (v Variant) ScheduleOr(common schedule.Schedule) schedule.Schedule {
	if v.Schedule != nil {
		return *v.Schedule
	}
	return common
}

// GatewayRetryArgs are the retry flags of examples/gateway in every variant:
// the application's "retry once on 429" rule. Only the plan differs between
// the variants, and the plan's retry budget decides how many retries are
// actually made.
var GatewayRetryArgs = []string{"--max-retries", strconv.Itoa(GatewayMaxRetries), "--retry-on-429"}

// GatewayMaxRetries is the gateway's retries of one call in every variant.
const GatewayMaxRetries = 1

// Variants returns the variants in the order they run: the operator, the
// hand-tuned static share for 8 pods, the naive full contract per pod, and
// the operator with pods calling through the sidecar proxy, on the common
// schedule; then the laggard scenario on its own.
func Variants(s schedule.Schedule) ([]Variant, error) {
	static, err := StaticPlan(s.InitialReplicas)
	if err != nil {
		return nil, err
	}
	naive, err := NaivePlan()
	if err != nil {
		return nil, err
	}
	laggard := LaggardSchedule()
	return []Variant{
		{
			Name:        "operator",
			Description: "the operator divides the usable permits exactly over the Ready pods and hands them over as pods acknowledge",
			Operator:    true,
			Goals:       operatorGoals,
		},
		{
			Name:        "static",
			Description: "every pod keeps the share computed for 8 pods, as a hand-tuned config would",
			Plan:        &static,
			Goals:       staticGoals,
		},
		{
			Name:        "naive",
			Description: "every pod may hold the whole contract, and retries once on 429",
			Plan:        &naive,
			Goals:       naiveGoals,
		},
		ProxyVariant(),
		{
			Name:        "laggard",
			Description: fmt.Sprintf("the operator, with one pod applying every new plan %v late", LaggardDelay),
			Operator:    true,
			Laggard:     LaggardDelay,
			Schedule:    &laggard,
			Goals:       laggardGoals,
		},
	}, nil
}
