package v1alpha1

import "github.com/backpressure-dev/backpressure-operator/api/plan"

// ConditionReady is the condition type that says whether the quota's plan is
// computed, published and safe to enforce.
const ConditionReady = "Ready"

// ConditionHandedOver is the condition type that says whether every Ready
// pod holds its whole share and no pod may still hold more than it is told.
const ConditionHandedOver = "HandedOver"

// ConditionPlanApplied is the condition type that says whether every Ready,
// non-terminating pod has applied (acknowledged) the current plan revision,
// so that `kubectl wait --for=condition=PlanApplied dq/NAME` waits for a new
// plan to be in force. It can only turn True for pods that acknowledge
// plans; see ReasonPodsNotAcknowledging.
const ConditionPlanApplied = "PlanApplied"

// ConditionReserved is the condition type that says whether the reserve
// spec.reserve asks for is kept out of the pods' division and held by the
// permit server's Ready replicas.
const ConditionReserved = "Reserved"

// ConditionDemandFollowing is the condition type that says whether the
// pods' shares follow their measured demand, as spec.shares.policy Demand
// asks.
const ConditionDemandFollowing = "DemandFollowing"

// Reasons of the DemandFollowing condition.
const (
	// ReasonDemandFollowed: the demand of the workload's pods was read and
	// the pods' part is divided by it.
	ReasonDemandFollowed = "DemandFollowed"
	// ReasonDemandUnavailable: no demand could be read (the custom metrics
	// API is not registered, or does not serve the metric for these pods);
	// the pods' part is divided equally until it can.
	ReasonDemandUnavailable = "DemandUnavailable"
	// ReasonDemandStale: the last reads of the demand failed, and the
	// shares follow the last reading that succeeded until it is
	// DemandKeep old, so that a short outage of the metrics pipeline does
	// not move every pod's share twice.
	ReasonDemandStale = "DemandStale"
	// ReasonEqualShares: the quota asks for equal shares (any longer).
	ReasonEqualShares = "EqualShares"
)

// Reasons of the Reserved condition.
const (
	// ReasonReserveHeld: the broker's Ready replicas are given the whole
	// reserve.
	ReasonReserveHeld = "ReserveHeld"
	// ReasonBrokerNotFound: spec.reserve.brokerRef names a Deployment that
	// does not exist; the reserve is held by nobody.
	ReasonBrokerNotFound = "BrokerNotFound"
	// ReasonNoReadyBroker: the broker's Deployment has no Ready pod; the
	// reserve is held by nobody until one is Ready.
	ReasonNoReadyBroker = "NoReadyBroker"
	// ReasonReserveTooLarge: the reserve asked for would leave a Ready pod
	// of the workload without a permit of its own; it is cut to leave each
	// one permit.
	ReasonReserveTooLarge = "ReserveTooLarge"
	// ReasonNoReserve: the quota asks for no reserve (any longer); its
	// pods hold every usable permit.
	ReasonNoReserve = "NoReserve"
)

// Reasons of the Ready condition and of diagnostics. They are CamelCase, as
// the Kubernetes API conventions ask, and stable: alerts and scripts match
// them.
const (
	// ReasonPlanPublished: the plan is computed and published.
	ReasonPlanPublished = "PlanPublished"
	// ReasonWorkloadNotFound: the workload named by workloadRef does not exist.
	ReasonWorkloadNotFound = "WorkloadNotFound"
	// ReasonHPANotFound: the HPA named by hpaName does not exist.
	ReasonHPANotFound = "HPANotFound"
	// ReasonQuotaTooSmall: the contract gives each pod less than one permit
	// and the Strict policy left them at zero.
	ReasonQuotaTooSmall = "QuotaTooSmall"
	// ReasonOvercommitted: the AtLeastOne policy raised pods to one permit,
	// so the pods together may exceed the contract.
	ReasonOvercommitted = "Overcommitted"
	// ReasonDeadlineBelowLatency: the deadline is not above the typical
	// latency, so no time is left to queue. (A worst latency that does not
	// fit in the deadline is the diagnostic WorstLatencyExceedsDeadline,
	// which leaves the quota Ready.)
	ReasonDeadlineBelowLatency = "DeadlineBelowLatency"
	// ReasonDemandExceedsQuota: the expected demand needs more in-flight
	// calls than the contract hands out, so part of it will be shed.
	ReasonDemandExceedsQuota = "DemandExceedsQuota"
	// ReasonConfigMapConflict: a ConfigMap of the target name exists and is
	// not the operator's; it was left untouched.
	ReasonConfigMapConflict = "ConfigMapConflict"
	// ReasonInvalidSpec: the spec passed the schema but gives no plan; the
	// message names the field.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonContractNotFound: contractRef names a DownstreamContract that
	// does not exist, or whose namespaceSelector does not admit the quota's
	// namespace.
	ReasonContractNotFound = "ContractNotFound"
	// ReasonContractOversubscribed: quotas that name the same downstream
	// without sharing one contract hand out more than its concurrency
	// together.
	ReasonContractOversubscribed = "ContractOversubscribed"
	// ReasonUnacknowledgedDelayTooShort: spec.handover.unacknowledgedDelay
	// is shorter than the deadline, so a pod that does not acknowledge may
	// still have calls above a smaller share when its old share stops
	// counting.
	ReasonUnacknowledgedDelayTooShort = "UnacknowledgedDelayTooShort"
	// ReasonDivisionTooLarge: the division names more pods than its record
	// (status.division) or its document (the ConfigMap key) can hold within
	// the API server's limits; nothing new is published, and the pods keep
	// the last plan that was.
	ReasonDivisionTooLarge = "DivisionTooLarge"

	// ReasonHandedOver: every Ready pod holds its share; nothing is pending.
	ReasonHandedOver = "HandedOver"
	// ReasonHandoverInProgress: some pods wait for capacity that other pods
	// are still giving up.
	ReasonHandoverInProgress = "HandoverInProgress"
	// ReasonHandoverStalled: a pod has not acknowledged a smaller share for
	// longer than spec.handover.stalledAfter; its old share stays counted,
	// so the pods waiting for it stay below their share.
	ReasonHandoverStalled = "HandoverStalled"

	// ReasonAllPodsApplied: every Ready pod has acknowledged the current
	// plan revision (or a newer one).
	ReasonAllPodsApplied = "AllPodsApplied"
	// ReasonNoReadyPods: no pod is Ready, so no pod enforces an older plan;
	// a pod that turns Ready must acknowledge the current one.
	ReasonNoReadyPods = "NoReadyPods"
	// ReasonPodsPending: some Ready pods have acknowledged an earlier
	// revision of this plan and not yet the current one, usually because
	// their calls in flight are still above a smaller share.
	ReasonPodsPending = "PodsPending"
	// ReasonPodsNotAcknowledging: some Ready pods carry no acknowledgement
	// of this plan at all: their runtime has acknowledgement off (or reads a
	// mounted volume without an API client), or it has just started. Such
	// pods never acknowledge, so the condition stays False while they run.
	ReasonPodsNotAcknowledging = "PodsNotAcknowledging"
	// ReasonPlanNotPublished: the current plan is not published (Ready is
	// False and says why), so no pod can apply it.
	ReasonPlanNotPublished = "PlanNotPublished"
)

// Names shared by the operator, which publishes, and the runtime library,
// which reads and acknowledges.
const (
	// WorkloadLabel labels a published ConfigMap with its workload's name.
	WorkloadLabel = "backpressure.dev/workload"
	// AppliedAnnotationPrefix prefixes the pod annotation by which the
	// library acknowledges a plan: applied.backpressure.dev/<quota-name>:
	// <epoch>/<revision> once its calls in flight are within its share of
	// that revision, or <epoch>/released once it has closed its gate and
	// drained on shutdown. It is plan.AppliedAnnotationPrefix, the one
	// definition both sides read.
	AppliedAnnotationPrefix = plan.AppliedAnnotationPrefix
	// ConfigMapSuffix makes the default ConfigMap name <workload>-backpressure.
	ConfigMapSuffix = "-backpressure"
	// AcknowledgesAnnotation, on a pod (set in the workload's pod
	// template), declares whether the pod's runtime acknowledges the plans
	// it applies: "true" or "false". A pod that declares it acknowledges
	// is counted at its old share until it acknowledges a smaller one,
	// however long that takes; one that declares it does not is counted
	// at it until spec.handover.unacknowledgedDelay has passed since the
	// smaller share was published. Without the annotation the operator
	// infers it: a pod that has acknowledged a plan of the division
	// acknowledges.
	AcknowledgesAnnotation = "backpressure.dev/acknowledges"
)
