package v1alpha1

// ConditionReady is the condition type that says whether the quota's plan is
// computed, published and safe to enforce.
const ConditionReady = "Ready"

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
)

// Names shared by the operator, which publishes, and the runtime library,
// which reads and acknowledges.
const (
	// WorkloadLabel labels a published ConfigMap with its workload's name.
	WorkloadLabel = "backpressure.dev/workload"
	// AppliedAnnotationPrefix prefixes the pod annotation by which the runtime
	// acknowledges a plan: applied.backpressure.dev/<quota-name>: <hash>.
	AppliedAnnotationPrefix = "applied.backpressure.dev/"
	// ConfigMapSuffix makes the default ConfigMap name <workload>-backpressure.
	ConfigMapSuffix = "-backpressure"
)
