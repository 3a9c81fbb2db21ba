package report

import (
	"sort"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// Report is the outcome of a storm run: every variant on the same schedule.
// Its JSON form is a contract (see the field tags): contract,
// variants.<name>.downstream429, .peakInFlight, .localSheds,
// .goodputPerSecond, .gatewayP99Seconds and
// variants.operator.reloadLatencySeconds.p50 and .p99.
type Report struct {
	// Contract is the downstream's global in-flight limit.
	Contract int `json:"contract"`
	// SafetyPercent is the part of it the operator hands out.
	SafetyPercent int `json:"safetyPercent"`
	// TypicalLatencySeconds is the downstream's usual latency.
	TypicalLatencySeconds float64 `json:"typicalLatencySeconds"`
	// GoodputCeilingPerSecond is contract × safety / typical latency.
	GoodputCeilingPerSecond float64 `json:"goodputCeilingPerSecond"`
	// RequestsPerSecond is the load asked for.
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	// DurationSeconds is each variant's load duration.
	DurationSeconds float64 `json:"durationSeconds"`
	// Order lists the variants in the order they ran.
	Order []string `json:"order"`
	// Variants holds each variant's figures by name.
	Variants map[string]*VariantReport `json:"variants"`
	// Goals are the run's goals and whether each was met.
	Goals []Goal `json:"goals"`
}

// VariantReport is one variant's figures.
type VariantReport struct {
	Name        string `json:"name"`
	Description string `json:"description"`

	// HPAMetric names the metric the HPA scaled on, and HPATarget its
	// target (an average value per pod for the demand, the value for the
	// replicas a scenario asks for).
	HPAMetric string  `json:"hpaMetric"`
	HPATarget float64 `json:"hpaTarget"`

	// Downstream429 counts the downstream's 429 answers (retries included).
	Downstream429 int64 `json:"downstream429"`
	// Downstream429Fraction is Downstream429 over all downstream calls.
	Downstream429Fraction float64 `json:"downstream429Fraction"`
	// DownstreamCalls counts every call the downstream received.
	DownstreamCalls int64 `json:"downstreamCalls"`
	// DownstreamOK counts the calls it answered 200.
	DownstreamOK int64 `json:"downstreamOK"`
	// DownstreamAbandoned counts calls whose caller left before the answer.
	DownstreamAbandoned int64 `json:"downstreamAbandoned"`
	// PeakInFlight is the highest number of calls in flight the downstream
	// ever saw, the ones it rejected at once included.
	PeakInFlight int64 `json:"peakInFlight"`
	// LocalSheds counts requests answered by the gateway's fallback because
	// the gate rejected the call locally.
	LocalSheds int64 `json:"localSheds"`
	// LocalShedFraction is LocalSheds over the requests answered.
	LocalShedFraction float64 `json:"localShedFraction"`
	// LocalShedReasons counts the sheds by reason.
	LocalShedReasons map[string]int64 `json:"localShedReasons"`
	// GoodputPerSecond is the downstream's 200s per second over the run.
	GoodputPerSecond float64 `json:"goodputPerSecond"`
	// GatewayP50Seconds and GatewayP99Seconds are the client-side latency
	// of every answered request, fallbacks included.
	GatewayP50Seconds float64 `json:"gatewayP50Seconds"`
	GatewayP99Seconds float64 `json:"gatewayP99Seconds"`
	// GatewayOKP99Seconds is the same over the requests the downstream
	// served.
	GatewayOKP99Seconds float64 `json:"gatewayOKP99Seconds"`

	// Load is what the harness sent and how it was answered.
	Load LoadReport `json:"load"`
	// Phases break the run down by the schedule's phases.
	Phases []PhaseReport `json:"phases"`

	// ReloadLatencySeconds is the time from the harness seeing a new plan in
	// the ConfigMap to each running pod applying it (operator only).
	ReloadLatencySeconds *LatencyReport `json:"reloadLatencySeconds,omitempty"`
	// Plans lists the plans the operator published during the run.
	Plans []PlanReport `json:"plans,omitempty"`
	// Rollout is the quota's status.rollout at the end (operator only).
	Rollout *RolloutReport `json:"rollout,omitempty"`
	// ScaleSteps say how the operator followed each autoscaler step.
	ScaleSteps []ScaleStepReport `json:"scaleSteps,omitempty"`
	// Capacity compares the permits the Ready pods held with the usable
	// total, and with the previous division on the same schedule (operator
	// variants only).
	Capacity *CapacityReport `json:"capacity,omitempty"`
	// Laggard names the pod that applied every plan late, if any.
	Laggard string `json:"laggard,omitempty"`
	// PermitsCheck says whether the pods running at the end export, in
	// backpressure_gate_permits, the permits their logs said (operator
	// variants only): the capacity figures count from the logs.
	PermitsCheck *observe.PermitsCheck `json:"permitsCheck,omitempty"`
	// StaticPermits is the fixed per-pod permits of a variant without the
	// operator.
	StaticPermits int `json:"staticPermits,omitempty"`
	// RetryAmplification is the attempts per request measured in each
	// phase, against the sizing model's, for a variant whose retries no
	// budget limits (the naive one).
	RetryAmplification []PhaseAmplification `json:"retryAmplification,omitempty"`

	// Timeline has the 100 ms samples the plot is drawn from.
	Timeline []TimelinePoint `json:"timeline"`

	// Goals are the variant's goals, judged by its scenario; the report's
	// JSON has them at its top level (Report.Goals).
	Goals []Goal `json:"-"`
}

// LoadReport is the harness's side of the load.
type LoadReport struct {
	TargetPerSecond   float64          `json:"targetPerSecond"`
	AchievedPerSecond float64          `json:"achievedPerSecond"`
	Sent              int64            `json:"sent"`
	Dropped           int64            `json:"dropped"`
	NoEndpoint        int64            `json:"noEndpoint"`
	Answered          map[string]int64 `json:"answered"`
	DownstreamErrors  map[string]int64 `json:"downstreamErrors"`
	Errors            map[string]int64 `json:"errors"`
}

// PhaseReport is one phase of the schedule.
type PhaseReport struct {
	Name   string  `json:"name"`
	From   float64 `json:"fromSeconds"`
	To     float64 `json:"toSeconds"`
	Steady bool    `json:"steady"`
	// GoodputPerSecond is measured over MeasuredSeconds at the end of the
	// phase, after its settle time; both are 0 when the phase is shorter
	// than the settle time.
	GoodputPerSecond float64 `json:"goodputPerSecond"`
	MeasuredSeconds  float64 `json:"measuredSeconds"`
	Downstream429    int64   `json:"downstream429"`
	PeakInFlight     int64   `json:"peakInFlight"`
	LocalSheds       int64   `json:"localSheds"`
	ReadyPodsAtEnd   int     `json:"readyPodsAtEnd"`
	GatewayP99       float64 `json:"gatewayP99Seconds"`
}

// LatencyReport summarises a set of latencies.
type LatencyReport struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// PlanReport is a plan the operator published.
type PlanReport struct {
	At      float64 `json:"atSeconds"`
	Hash    string  `json:"hash"`
	Permits int     `json:"permits"`
	// AppliedBy counts the pods that logged applying it.
	AppliedBy int `json:"appliedBy"`
}

// ScaleStepReport is how the operator followed one autoscaler step.
type ScaleStepReport struct {
	At   float64 `json:"atSeconds"`
	From int32   `json:"from"`
	To   int32   `json:"to"`
	// Plans counts the plans published until the next step.
	Plans int `json:"plans"`
	// FirstPlanSeconds is the time from the decision to the first new plan
	// in the ConfigMap.
	FirstPlanSeconds float64 `json:"firstPlanSeconds"`
	// SettledPlanSeconds is the time to the step's last plan (on a
	// scale-down, the shares grow only once departing pods are gone).
	SettledPlanSeconds float64 `json:"settledPlanSeconds"`
	// SettledHandedOut is the permits the step's last plan gives the pods
	// it names.
	SettledHandedOut int `json:"settledHandedOut"`
	// AppliedBy counts the pods running at the decision that applied the
	// last plan; AppliedP50Seconds and AppliedMaxSeconds are the times from
	// the decision to their applying it.
	AppliedBy         int     `json:"appliedBy"`
	AppliedP50Seconds float64 `json:"appliedP50Seconds"`
	AppliedMaxSeconds float64 `json:"appliedMaxSeconds"`
}

// RolloutReport is the quota's rollout status.
type RolloutReport struct {
	Acknowledged int32 `json:"acknowledged"`
	Total        int32 `json:"total"`
	// Last is the last published plan's acknowledgement, <epoch>/<revision>.
	Last string `json:"last"`
	// Current says whether the status was about the last published plan
	// (its division's epoch and revision).
	Current bool `json:"current"`
	// StalePods counts pods alive at the end whose applied annotation was
	// not Last.
	StalePods int `json:"stalePods"`
}

// TimelinePoint is one 100 ms sample.
type TimelinePoint struct {
	At float64 `json:"t"`
	// InFlight is the downstream's peak in-flight count in the sample's
	// window, rejected calls included.
	InFlight int64 `json:"inFlight"`
	// Rejected429 counts its 429s in the window.
	Rejected429 int64 `json:"rejected429"`
	// OK counts its 200s in the window.
	OK int64 `json:"ok"`
	// Desired is the Deployment's spec.replicas; Existing and Ready are
	// the workload's pod counts.
	Desired  int32 `json:"desired"`
	Existing int   `json:"existing"`
	Ready    int   `json:"ready"`
	// LatencySeconds is the downstream's latency.
	LatencySeconds float64 `json:"latencySeconds"`
	// Permits is the sum of the running pods' permits: what the pods may
	// hold in flight together.
	Permits int `json:"permits"`
	// ReadyPermits is the sum of the Ready pods' permits.
	ReadyPermits int `json:"readyPermits"`
	// LaggardPermits is the laggard's permits, when there is one.
	LaggardPermits int `json:"laggardPermits,omitempty"`
	// PreviousPermits and PreviousReadyPermits are Permits and ReadyPermits
	// as the previous division would have had them (see CapacityReport).
	PreviousPermits      int `json:"previousPermits,omitempty"`
	PreviousReadyPermits int `json:"previousReadyPermits,omitempty"`
	// HPADesired is the HPA's status.desiredReplicas, and HPAMetric the
	// current value of the metric it scaled on (per pod for the demand),
	// when the HPA controller had one.
	HPADesired int32    `json:"hpaDesired"`
	HPAMetric  *float64 `json:"hpaMetric,omitempty"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func latencyReport(ds []time.Duration) *LatencyReport {
	q := QuantilesOf(ds)
	return &LatencyReport{Count: q.Count, P50: seconds(q.P50), P99: seconds(q.P99), Max: seconds(q.Max)}
}

// WriteJSON writes the report to path, creating its directory.
func (r *Report) WriteJSON(path string) error { return WriteJSON(path, r) }

// Downstream is the downstream of a run as its report needs it: its
// contract, the part of it the operator hands out, and its usual latency.
type Downstream struct {
	// Contract is its global in-flight limit.
	Contract int
	// SafetyPercent is the part of the contract the operator hands out.
	SafetyPercent int
	// TypicalLatency is its usual response time.
	TypicalLatency time.Duration
}

// Usable returns the permits the operator hands out: floor(contract ×
// safety).
func (d Downstream) Usable() int { return d.Contract * d.SafetyPercent / 100 }

// GoodputCeiling is the usable permits over the typical latency: the most
// successful calls per second a division that holds the contract
// completes.
func (d Downstream) GoodputCeiling() float64 {
	return float64(d.Usable()) / d.TypicalLatency.Seconds()
}

// New starts a report of runs of the downstream d on the schedule s.
func New(d Downstream, s schedule.Schedule) *Report {
	return &Report{
		Contract:                d.Contract,
		SafetyPercent:           d.SafetyPercent,
		TypicalLatencySeconds:   d.TypicalLatency.Seconds(),
		GoodputCeilingPerSecond: d.GoodputCeiling(),
		RequestsPerSecond:       s.RequestsPerSecond,
		DurationSeconds:         s.Duration.Seconds(),
		Variants:                map[string]*VariantReport{},
	}
}

// Add adds a variant's figures, or replaces them, and its goals.
func (r *Report) Add(v *VariantReport) {
	if _, ok := r.Variants[v.Name]; !ok {
		r.Order = append(r.Order, v.Name)
	}
	r.Variants[v.Name] = v
	r.Goals = nil
	for _, name := range r.Order {
		r.Goals = append(r.Goals, r.Variants[name].Goals...)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
