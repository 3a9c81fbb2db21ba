package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DownstreamContractSpec is a downstream's global contract, shared by the
// workloads whose DownstreamQuotas name it in contractRef.
type DownstreamContractSpec struct {
	// Downstream names the service being called, for people and metrics.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Downstream string `json:"downstream"`
	// Contract is the downstream's global limit.
	// +required
	Contract Contract `json:"contract"`
	// SafetyPercent is the part of the contract handed out to the callers'
	// pods.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=80
	// +optional
	SafetyPercent int32 `json:"safetyPercent,omitempty"`
	// RetryBudgetPerSecond is the global number of retries per second all
	// callers together may spend; each gets its part.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	RetryBudgetPerSecond int32 `json:"retryBudgetPerSecond,omitempty"`
	// NamespaceSelector selects the namespaces whose quotas may share this
	// contract. When absent, no namespace may: a contract names who may use
	// it, and {} admits every namespace, explicitly.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// MaxWeightPerNamespace caps the weight the quotas of one namespace hold
	// together on this contract, whatever weights they state and however
	// many they are. A namespace's quotas are taken oldest first; each gets
	// its weight, or what is left of the cap, and those left with nothing
	// get no part. It keeps one tenant from shrinking the others' parts by
	// raising its weight or by creating more quotas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=1
	// +optional
	MaxWeightPerNamespace int32 `json:"maxWeightPerNamespace,omitempty"`
	// Handover bounds how capacity moves between the callers' pods.
	// +optional
	Handover Handover `json:"handover,omitempty"`
}

// CallerStatus is one caller's part of a shared contract.
type CallerStatus struct {
	// Namespace of the caller's DownstreamQuota.
	Namespace string `json:"namespace"`
	// Quota is the caller's DownstreamQuota.
	Quota string `json:"quota"`
	// Workload is the kind and name of the caller's workload.
	Workload string `json:"workload"`
	// Weight is the caller's weight.
	Weight int32 `json:"weight"`
	// Demand is the calls in flight the caller can use; absent when it
	// stated none.
	// +optional
	Demand *int32 `json:"demand,omitempty"`
	// ReadyPods is the number of the caller's pods its part is divided over.
	ReadyPods int32 `json:"readyPods"`
	// Permits is the caller's part of the usable permits.
	Permits int32 `json:"permits"`
	// RatePerSecond is the caller's part of the usable rate.
	// +optional
	RatePerSecond resource.Quantity `json:"ratePerSecond,omitempty"`
	// Reason says why the part is what it is, with the arithmetic.
	Reason string `json:"reason"`
}

// MaxListedCallers is the most callers a DownstreamContract's status lists.
const MaxListedCallers = 100

// DownstreamContractStatus is how the contract is split over its callers.
type DownstreamContractStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Usable is the permits handed out: floor(concurrency × cluster share ×
	// safety).
	// +optional
	Usable int32 `json:"usable,omitempty"`
	// Callers are the quotas sharing the contract, by namespace and name:
	// the first 100 (MaxListedCallers); each quota's status has its own
	// part too.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Callers []CallerStatus `json:"callers,omitempty"`
	// CallersNotListed counts the callers that callers leaves out.
	// +optional
	CallersNotListed int32 `json:"callersNotListed,omitempty"`
	// Division is the handover state over every caller's pods, keyed by
	// namespace/quota/name.
	// +optional
	Division *DivisionStatus `json:"division,omitempty"`
	// Conditions hold Ready and HandedOver.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DownstreamContract is a downstream's global contract shared by several
// workloads, in one namespace or many: each workload's DownstreamQuota names
// it in contractRef, and the operator splits it over them by weighted
// max-min fairness capped at each one's demand, then over each one's pods
// exactly.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=dc,categories=backpressure
// +kubebuilder:printcolumn:name="Downstream",type=string,JSONPath=`.spec.downstream`
// +kubebuilder:printcolumn:name="Concurrency",type=integer,JSONPath=`.spec.contract.concurrency`
// +kubebuilder:printcolumn:name="Usable",type=integer,JSONPath=`.status.usable`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Handed-Out",type=integer,JSONPath=`.status.division.handedOut`,priority=1
// +kubebuilder:printcolumn:name="Handed-Over",type=string,JSONPath=`.status.conditions[?(@.type=="HandedOver")].reason`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type DownstreamContract struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the contract and who may share it.
	// +required
	Spec DownstreamContractSpec `json:"spec"`
	// Status is how it is split.
	// +optional
	Status DownstreamContractStatus `json:"status,omitempty"`
}

// DownstreamContractList is a list of DownstreamContract.
//
// +kubebuilder:object:root=true
type DownstreamContractList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the contracts.
	Items []DownstreamContract `json:"items"`
}
