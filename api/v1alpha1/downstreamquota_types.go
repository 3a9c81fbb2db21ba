package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Durations are metav1.Duration strings of at most one hour (the bound of
// the published plan's durations, plan.MaxSeconds) checked by CEL: the rule
// self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') gives a message a
// person can act on, and every rule that calls duration() first checks that
// syntax, because duration() of a malformed string fails the rule with a type
// conversion error instead of the field's own message.

// BelowOnePolicy says what a pod's share becomes when the contract divided
// over the divisor is less than one permit.
// +kubebuilder:validation:Enum=Strict;AtLeastOne
type BelowOnePolicy string

const (
	// BelowOneStrict gives such pods zero permits, so the global contract
	// holds and the quota reports QuotaTooSmall.
	BelowOneStrict BelowOnePolicy = "Strict"
	// BelowOneAtLeastOne gives every pod one permit, so each pod can still
	// call the downstream, and the quota reports Overcommitted with the real
	// global total.
	BelowOneAtLeastOne BelowOnePolicy = "AtLeastOne"
)

// DivisorSource names the replica fact that set the divisor.
// +kubebuilder:validation:Enum=WorkloadSpec;HPADesired;ExistingPods;ReadyPods
type DivisorSource string

const (
	// DivisorWorkloadSpec means the workload's spec.replicas was the largest.
	DivisorWorkloadSpec DivisorSource = "WorkloadSpec"
	// DivisorHPADesired means the HPA's status.desiredReplicas was the largest.
	DivisorHPADesired DivisorSource = "HPADesired"
	// DivisorExistingPods means the pods that still exist (terminating ones
	// included) outnumbered both, as during a scale-down.
	DivisorExistingPods DivisorSource = "ExistingPods"
	// DivisorReadyPods means the usable permits are divided over the pods
	// that are Ready and not terminating, as the exact division does; the
	// other replica facts are reported for information.
	DivisorReadyPods DivisorSource = "ReadyPods"
)

// WorkloadReference names the Deployment or StatefulSet, in the quota's own
// namespace, whose pods call the downstream.
type WorkloadReference struct {
	// APIVersion of the workload.
	// +kubebuilder:default="apps/v1"
	// +kubebuilder:validation:Enum="apps/v1"
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the workload.
	// +kubebuilder:validation:Enum=Deployment;StatefulSet
	// +required
	Kind string `json:"kind"`

	// Name of the workload.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// Contract is the downstream's global limit, shared by every pod of the
// workload.
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || self.burst == 0 || (has(self.ratePerSecond) && self.ratePerSecond > 0)",message="burst requires a ratePerSecond greater than zero",fieldPath=".burst"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterShare) || !has(self.clusterShare.concurrency) || self.clusterShare.concurrency <= self.concurrency",message="must not exceed the contract's concurrency",fieldPath=".clusterShare.concurrency"
type Contract struct {
	// Concurrency is the number of calls the downstream accepts in flight at
	// once, globally; at most 1048575, the most calls a pod's gate counts,
	// since one pod may be given all of it.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048575
	// +required
	Concurrency int32 `json:"concurrency"`

	// RatePerSecond is the downstream's global request rate limit; zero or
	// absent means none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	RatePerSecond int32 `json:"ratePerSecond,omitempty"`

	// Burst is the number of requests the downstream accepts above the rate
	// at once; it requires ratePerSecond.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	Burst int32 `json:"burst,omitempty"`
	// ClusterShare is the part of the contract this cluster may use, when
	// callers in other clusters share it too. The rate and burst scale by
	// the same fraction. When absent, this cluster uses all of it.
	// +optional
	ClusterShare *ClusterShare `json:"clusterShare,omitempty"`
}

// ClusterShare is the part of a contract that callers in this cluster may
// use: a count of calls in flight, or a percentage. Exactly one is given.
// +kubebuilder:validation:XValidation:rule="has(self.concurrency) != has(self.percent)",message="exactly one of concurrency and percent must be given"
type ClusterShare struct {
	// Concurrency is the calls in flight this cluster may use; at most the
	// contract's concurrency.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048575
	// +optional
	Concurrency *int32 `json:"concurrency,omitempty"`
	// Percent is the percentage of the contract this cluster may use.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Percent *int32 `json:"percent,omitempty"`
}

// Latency is the downstream's response time.
// +kubebuilder:validation:XValidation:rule="!has(self.worst) || !self.worst.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.typical.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.worst) >= duration(self.typical)",message="worst must not be below typical",fieldPath=".worst"
type Latency struct {
	// Typical is the usual response time; the plan's capacity and queue
	// budget are computed from it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) > duration('0s')",message="must be greater than zero"
	// +required
	Typical metav1.Duration `json:"typical"`

	// Worst is the response time during the downstream's bad moments (its
	// deploys, its GC pauses); the plan checks it against the deadline.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +optional
	Worst *metav1.Duration `json:"worst,omitempty"`
}

// Demand is what the whole workload is expected to ask of the downstream:
// a rate, calls in flight, or both.
// +kubebuilder:validation:XValidation:rule="has(self.ratePerSecond) || has(self.inFlight)",message="at least one of ratePerSecond and inFlight must be given"
type Demand struct {
	// RatePerSecond is the expected total request rate over all pods.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	RatePerSecond int32 `json:"ratePerSecond,omitempty"`
	// InFlight is the most calls in flight the whole workload can use. When
	// absent it is ratePerSecond × typical latency (Little's law). A caller
	// of a shared contract is never given more than it can use while
	// another caller wants more.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048575
	// +optional
	InFlight *int32 `json:"inFlight,omitempty"`
}

// ContractReference names the cluster-scoped DownstreamContract a quota's
// workload shares with other callers.
type ContractReference struct {
	// Name of the DownstreamContract.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// Handover bounds how capacity moves between pods.
type Handover struct {
	// UnacknowledgedDelay is how long after a pod that does not acknowledge
	// plans (acknowledgement off, or a plan read from a mounted volume) was
	// told a smaller share it is taken to have applied it and finished the
	// calls above it; only then is its capacity handed to another pod. The
	// default, 150s, covers the kubelet's refresh of a mounted ConfigMap
	// (its sync period plus its cache's time to live, a minute each by
	// default) and a call's deadline.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +optional
	UnacknowledgedDelay *metav1.Duration `json:"unacknowledgedDelay,omitempty"`
	// StalledAfter is how long a pod that acknowledges plans may take to
	// acknowledge a smaller share before the quota reports the handover
	// stalled (condition HandedOver False, reason HandoverStalled, and a
	// Warning event). Its capacity is never reassigned meanwhile. Default
	// 30s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +optional
	StalledAfter *metav1.Duration `json:"stalledAfter,omitempty"`
}

// RetryPolicy bounds the retries of calls to the downstream.
type RetryPolicy struct {
	// MaxRetries is the most retries of one call.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +kubebuilder:default=0
	// +optional
	MaxRetries int32 `json:"maxRetries"`

	// BudgetPerSecond is the global number of retries per second the whole
	// workload may spend; each pod gets its share.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000000
	// +kubebuilder:default=0
	// +optional
	BudgetPerSecond int32 `json:"budgetPerSecond"`
}

// Reserve is a part of the quota's usable permits that is not divided over
// the workload's pods: the Ready replicas of a permit server
// (backpressure-broker) hold it, in exact slices, and lend it one call at a
// time to pods whose own share is full.
type Reserve struct {
	// Permits is the size of the reserve: a count of permits, or a
	// percentage such as "20%" of the quota's usable permits (its part of
	// a shared contract when it names one), rounded down. It must leave
	// every Ready pod of the workload at least one permit; a larger
	// reserve is cut to that, and condition Reserved says so (reason
	// ReserveTooLarge).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="must be a count of at least 0"
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self <= 1048575",message="must be a count of at most 1048575"
	// +kubebuilder:validation:XValidation:rule="type(self) != string || self.matches('^(100|[1-9]?[0-9])%$')",message="must be a count or a percentage between 0% and 100%"
	// +required
	Permits intstr.IntOrString `json:"permits"`
	// BrokerRef names the Deployment, in the quota's namespace, that runs
	// backpressure-broker. Its Ready pods are members of the division like
	// the workload's pods: the published plan names each with its slice,
	// and a replica that is to give permits up acknowledges before they
	// move.
	// +required
	BrokerRef BrokerReference `json:"brokerRef"`
}

// BrokerReference names the Deployment that runs the permit server.
type BrokerReference struct {
	// Name of the Deployment.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SharesPolicy is how a caller's permits are divided over its Ready pods.
// +kubebuilder:validation:Enum=Equal;Demand
type SharesPolicy string

const (
	// SharesEqual divides the pods' part equally (one pod more when it
	// does not divide evenly).
	SharesEqual SharesPolicy = "Equal"
	// SharesDemand divides the pods' part by each pod's measured demand.
	SharesDemand SharesPolicy = "Demand"
)

// Shares is how the pods' part of the usable permits (what the reserve
// leaves) is divided over the workload's Ready pods.
//
// Demand-following is off by default: it needs a custom metrics API
// (custom.metrics.k8s.io, such as prometheus-adapter) serving the metric
// for the workload's pods, and equal shares need nothing. Behind an even
// balancer it buys little; behind pinned connections (gRPC, HTTP/2) or an
// uneven balancer a pod's share then follows where its calls go.
// +kubebuilder:validation:XValidation:rule="!has(self.metric) || self.policy == 'Demand'",message="is read only with policy Demand",fieldPath=".metric"
type Shares struct {
	// Policy is Equal (the default) or Demand. With Demand the operator
	// reads the metric for the workload's pods every 15 seconds (one
	// request per quota) and divides the pods' part by water-filling:
	// every Ready pod at least one permit, the rest by max-min fairness
	// capped at each pod's demand, what is left once every pod has its
	// demand split evenly; a pod the metric has no value for (a new one)
	// claims without a cap. The division moves only when a pod's share
	// is more than one permit or a quarter of it away from its demand's,
	// and through the same handover as under Equal. When no demand can be
	// read the pods' part is divided equally and condition
	// DemandFollowing says why.
	// +kubebuilder:default=Equal
	// +optional
	Policy SharesPolicy `json:"policy,omitempty"`
	// Metric is the custom metrics API's Pods metric read with policy
	// Demand: each pod's calls in flight, waiting and shed, in permits.
	// When empty it is backpressure_gate_demand_in_flight.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-zA-Z_:][a-zA-Z0-9_:]*$')",message="must be a metric name such as backpressure_gate_demand_in_flight"
	// +optional
	Metric string `json:"metric,omitempty"`
}

// DownstreamQuotaSpec is a downstream's global contract and the workload it
// is divided over.
// +kubebuilder:validation:XValidation:rule="has(self.contract) != has(self.contractRef)",message="exactly one of contract and contractRef must be given",fieldPath=".contract"
// +kubebuilder:validation:XValidation:rule="!has(self.maxQueueWait) || !self.maxQueueWait.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.deadline.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.maxQueueWait) < duration(self.deadline)",message="must be less than deadline",fieldPath=".maxQueueWait"
// +kubebuilder:validation:XValidation:rule="!has(self.reserve) || self.workloadRef.kind != 'Deployment' || self.reserve.brokerRef.name != self.workloadRef.name",message="must name another Deployment than workloadRef: the permit server's pods are not the workload's",fieldPath=".reserve.brokerRef.name"
// +kubebuilder:validation:XValidation:rule="!has(self.configMapName) || size(self.configMapName) == 0 || (self.configMapName.startsWith(self.workloadRef.name + '-') && self.configMapName.endsWith('-backpressure'))",message="must be <workload>-backpressure or <workload>-<name>-backpressure, where <workload> is workloadRef.name: the only names the operator may write to",fieldPath=".configMapName"
type DownstreamQuotaSpec struct {
	// WorkloadRef is the Deployment or StatefulSet whose pods share the
	// contract.
	// +required
	WorkloadRef WorkloadReference `json:"workloadRef"`

	// HPAName is the HorizontalPodAutoscaler that scales the workload. When
	// empty, the HPA whose scaleTargetRef names the workload is used, if any.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	HPAName string `json:"hpaName,omitempty"`

	// Downstream names the service being called, for people and metrics.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Downstream string `json:"downstream"`

	// Contract is the downstream's global limit, when this workload is its
	// only caller. Exactly one of contract and contractRef is given.
	// +optional
	Contract *Contract `json:"contract,omitempty"`
	// ContractRef names the cluster-scoped DownstreamContract when several
	// workloads, in this namespace or others, share the downstream's
	// contract. The contract's own concurrency, rate, burst, cluster share,
	// safety percentage and retry budget then apply, and this quota's
	// workload gets its part of them (see weight and demand).
	// +optional
	ContractRef *ContractReference `json:"contractRef,omitempty"`
	// Weight is this workload's weight when it shares a contract: parts are
	// split by weighted max-min fairness, capped at each caller's demand.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=1
	// +optional
	Weight int32 `json:"weight,omitempty"`

	// Latency is the downstream's response time.
	// +required
	Latency Latency `json:"latency"`

	// Deadline is the time one call may take, queue wait included.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) > duration('0s')",message="must be greater than zero"
	// +required
	Deadline metav1.Duration `json:"deadline"`

	// MaxQueueWait is the longest a call may wait in the waiting room. When
	// absent it is half of what the deadline leaves after the typical
	// latency.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +optional
	MaxQueueWait *metav1.Duration `json:"maxQueueWait,omitempty"`

	// AcquireTimeout is the longest a caller waits for a permit; the plan
	// uses the smaller of it and the queue wait budget. When absent the
	// queue wait budget is used.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('-')",message="must not be negative"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-') || self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 220ms or 1.5s"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="must be at most 1h"
	// +optional
	AcquireTimeout *metav1.Duration `json:"acquireTimeout,omitempty"`

	// SafetyPercent is the part of the contract handed out to pods; the rest
	// absorbs scale transitions and rounding.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=80
	// +optional
	SafetyPercent int32 `json:"safetyPercent,omitempty"`

	// BelowOne says what happens when a pod's share is below one permit.
	// +kubebuilder:default=Strict
	// +optional
	BelowOne BelowOnePolicy `json:"belowOne,omitempty"`

	// Demand is the expected load of the whole workload, when known.
	// +optional
	Demand *Demand `json:"demand,omitempty"`

	// Retry bounds retries of calls to the downstream.
	// +optional
	Retry RetryPolicy `json:"retry,omitempty"`
	// Handover bounds how capacity moves between pods as they come, turn
	// Ready and leave.
	// +optional
	Handover Handover `json:"handover,omitempty"`

	// Reserve keeps a part of the usable permits out of the division over
	// the pods, for a permit server to lend one call at a time. When
	// absent, the pods hold all of them.
	// +optional
	Reserve *Reserve `json:"reserve,omitempty"`

	// Shares is how the pods' part is divided over the Ready pods:
	// equally (the default), or by each pod's measured demand.
	// +optional
	Shares *Shares `json:"shares,omitempty"`

	// ConfigMapName is the ConfigMap the plan is published to. Every quota of
	// a workload must name the same one; when empty it is
	// <workload>-backpressure. It is <workload>-backpressure or
	// <workload>-<name>-backpressure: the operator's admission policy lets it
	// write no other name, so that it cannot be made to write a ConfigMap
	// another component reads by name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	ConfigMapName string `json:"configMapName,omitempty"`
}

// ReplicaStatus holds the replica facts the divisor was chosen from.
type ReplicaStatus struct {
	// Spec is the workload's spec.replicas.
	Spec int32 `json:"spec"`
	// Status is the workload's status.replicas.
	// +optional
	Status int32 `json:"status,omitempty"`
	// HPAMin is the HPA's spec.minReplicas.
	// +optional
	HPAMin *int32 `json:"hpaMin,omitempty"`
	// HPAMax is the HPA's spec.maxReplicas.
	// +optional
	HPAMax *int32 `json:"hpaMax,omitempty"`
	// HPACurrent is the HPA's status.currentReplicas.
	// +optional
	HPACurrent *int32 `json:"hpaCurrent,omitempty"`
	// HPADesired is the HPA's status.desiredReplicas.
	// +optional
	HPADesired *int32 `json:"hpaDesired,omitempty"`
	// ExistingPods counts the workload's pods that still exist, terminating
	// ones included.
	ExistingPods int32 `json:"existingPods"`
	// ReadyPods counts the workload's pods that are Ready and not
	// terminating: the pods the usable permits are divided over.
	// +optional
	ReadyPods int32 `json:"readyPods"`
	// Divisor is the number of pods the usable permits are divided over:
	// ReadyPods.
	Divisor int32 `json:"divisor"`
	// DivisorSource names the fact that set the divisor.
	DivisorSource DivisorSource `json:"divisorSource"`
}

// PerPodPlan is one pod's share of the contract.
type PerPodPlan struct {
	// Permits is the pod's in-flight limit. With spec.shares.policy
	// Demand no pod need hold it: it is then the pods' part divided by the
	// Ready pods, rounded down (the mean share), and status.podPermits and
	// status.division.shares show what they hold.
	Permits int32 `json:"permits"`
	// RatePerSecond is the pod's token-bucket rate; zero means unlimited.
	RatePerSecond resource.Quantity `json:"ratePerSecond"`
	// Burst is the pod's token-bucket size.
	Burst int32 `json:"burst"`
	// CapacityPerSecond is the calls per second the permits sustain at the
	// typical latency.
	// +optional
	CapacityPerSecond resource.Quantity `json:"capacityPerSecond,omitempty"`
	// QueueCapacity is the size of the pod's waiting room. With a reserve
	// it counts the reserve the broker's replicas are given too, as the
	// published plan does: floor((permits + reserve) × maxQueueWait /
	// latency).
	QueueCapacity int32 `json:"queueCapacity"`
	// MaxQueueWait is the longest a call waits in the waiting room.
	MaxQueueWait metav1.Duration `json:"maxQueueWait"`
	// AcquireTimeout is the longest a caller waits for a permit.
	AcquireTimeout metav1.Duration `json:"acquireTimeout"`
	// Workers is the dispatcher's worker count.
	Workers int32 `json:"workers"`
	// RetryBudgetPerSecond is the pod's share of the retry budget.
	RetryBudgetPerSecond resource.Quantity `json:"retryBudgetPerSecond"`
}

// DemandStatus compares the expected demand with what the plan hands out.
type DemandStatus struct {
	// InFlight is the demanded in-flight calls, demand × typical latency.
	InFlight int32 `json:"inFlight"`
	// WorstInFlight is demand × worst latency.
	// +optional
	WorstInFlight *int32 `json:"worstInFlight,omitempty"`
	// GoodputCeiling is the most calls per second the handed-out permits can
	// complete at the typical latency.
	GoodputCeiling resource.Quantity `json:"goodputCeiling"`
	// ShedFraction is the part of the demand that will be shed locally, as a
	// decimal between 0 and 1.
	ShedFraction string `json:"shedFraction"`
}

// Diagnostic is a finding of the plan, with its numbers.
type Diagnostic struct {
	// Reason is a CamelCase identifier of the finding.
	Reason string `json:"reason"`
	// Message states the finding with the arithmetic behind it.
	Message string `json:"message"`
}

// PublishedConfigMap names where the plan was published.
type PublishedConfigMap struct {
	// Name of the ConfigMap.
	Name string `json:"name"`
	// Key of this quota's document in the ConfigMap.
	Key string `json:"key"`
	// Hash is the content hash of this quota's document.
	Hash string `json:"hash"`
}

// RolloutStatus counts the pods that acknowledged the current plan.
type RolloutStatus struct {
	// Acknowledged is the number of existing pods whose
	// applied.backpressure.dev annotation carries the current hash.
	Acknowledged int32 `json:"acknowledged"`
	// Total is the number of existing pods.
	Total int32 `json:"total"`
	// Pending names up to ten pods that have not acknowledged it.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Pending []string `json:"pending,omitempty"`
}

// MaxListedPods is the most pods status.division.pods lists; the record of
// every pod is in status.division.told and status.division.holding.
const MaxListedPods = 100

// DivisionStatus is how a caller's usable permits are divided over its pods
// and where the handover between them stands. It is also the operator's
// record of what each pod may still hold (told and holding): it is written
// before any pod is told a new share.
type DivisionStatus struct {
	// Epoch identifies this division in the pods' acknowledgements: the UID
	// of the object that owns it.
	Epoch string `json:"epoch"`
	// Revision is the revision of the published plan; it grows with every
	// change of any pod's share, and is never published twice in an epoch.
	Revision int64 `json:"revision"`
	// Usable is the permits this caller hands out once the handover is
	// done: floor(concurrency × cluster share × safety), or its part of a
	// shared contract; under AtLeastOne with fewer permits than Ready pods,
	// one per Ready pod (the quota then reports Overcommitted). It
	// includes the reserve (status.reserve.permits), which the permit
	// server's replicas hold: they are members of the division, and
	// handedOut, held and pods count them too.
	Usable int32 `json:"usable"`
	// Base is floor((usable - reserve) / divisor); Extra pods hold one
	// more, so the Ready pods hold all of Usable but the reserve once the
	// handover is done.
	Base int32 `json:"base"`
	// Extra is usable mod divisor: the number of pods holding Base+1.
	Extra int32 `json:"extra"`
	// HandedOut is the permits the published plan gives the pods.
	HandedOut int32 `json:"handedOut"`
	// Held is Σ over pods of the larger of what each is told and what it
	// may still hold; never more than Usable (except as Overcommitted says).
	// A pod that released its share, or went, still holds it here until
	// no document of the gate in a ConfigMap gives its name anything (see
	// holding[].released): a pod created again under its name would
	// enforce what such a document gives it.
	Held int32 `json:"held"`
	// Shares counts the pods at each share, largest first.
	// +optional
	Shares []ShareCount `json:"shares,omitempty"`
	// Told is the record of the pods told permits that may hold no more:
	// their names (namespace/quota/name in a shared contract's record) by
	// share, largest first.
	// +listType=atomic
	// +optional
	Told []ToldPods `json:"told,omitempty"`
	// Holding is the record of the pods that may still hold more than they
	// are told: they have not yet let go of a larger share.
	// +listType=atomic
	// +optional
	Holding []HeldPods `json:"holding,omitempty"`
	// Clock names the operator process whose clock stamped holding's
	// times; another process starts every pending delay again on its own.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Clock string `json:"clock,omitempty"`
	// Pods lists, for people, up to 100 pods (MaxListedPods) that are told
	// or may still hold permits, or wait for them: first those whose
	// handover is under way, then the others by name.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Pods []PodShareStatus `json:"pods,omitempty"`
	// PodsNotListed counts the pods of the division that pods leaves out.
	// +optional
	PodsNotListed int32 `json:"podsNotListed,omitempty"`
}

// ToldPods are pods told one share that may hold no more.
type ToldPods struct {
	// Permits is the share.
	Permits int32 `json:"permits"`
	// Pods are the pods' names, sorted.
	// +listType=atomic
	Pods []string `json:"pods"`
}

// HeldPods are pods told one share that may still hold a larger one, since
// one revision.
type HeldPods struct {
	// Permits is the share they are told.
	Permits int32 `json:"permits"`
	// Holds is the most they may still hold.
	Holds int32 `json:"holds"`
	// ShrunkAtRevision is the revision that told them their smaller share;
	// they let go of the larger one by acknowledging it.
	ShrunkAtRevision int64 `json:"shrunkAtRevision"`
	// ShrunkAt is when the unacknowledged delay started counting for them.
	ShrunkAt metav1.MicroTime `json:"shrunkAt"`
	// Acknowledges is set for pods known to acknowledge: only their
	// acknowledgement frees their larger share, however long it takes.
	// +optional
	Acknowledges bool `json:"acknowledges,omitempty"`
	// Gone is set for pods whose objects are gone while their processes may
	// still run: their larger share counts until the unacknowledged delay
	// has passed since shrunkAt.
	// +optional
	Gone bool `json:"gone,omitempty"`
	// Released is set for pods that released their share (they closed
	// their gate with nothing in flight): their share counts under their
	// names until no document of the gate in a ConfigMap gives the names
	// anything, as a pod created again under one of them (a StatefulSet's)
	// would enforce what such a document gives it.
	// +optional
	Released bool `json:"released,omitempty"`
	// Pods are the pods' names, sorted.
	// +listType=atomic
	Pods []string `json:"pods"`
}

// ShareCount is a number of pods told the same share.
type ShareCount struct {
	// Permits is the share.
	Permits int32 `json:"permits"`
	// Pods is the number of pods told it.
	Pods int32 `json:"pods"`
}

// PodShareStatus is one pod's share and handover state.
type PodShareStatus struct {
	// Name of the pod.
	Name string `json:"name"`
	// Permits is the pod's share in the published plan.
	Permits int32 `json:"permits"`
	// Target is the share the pod will hold once the handover is done, when
	// it differs from Permits.
	// +optional
	Target *int32 `json:"target,omitempty"`
	// Holds is the most the pod may still hold, when that is more than
	// Permits: it has not yet acknowledged a smaller share.
	// +optional
	Holds *int32 `json:"holds,omitempty"`
	// ShrunkAtRevision is the revision that told the pod its smaller share,
	// while Holds is set.
	// +optional
	ShrunkAtRevision int64 `json:"shrunkAtRevision,omitempty"`
	// ShrunkAt is when the unacknowledged delay started counting for it.
	// +optional
	ShrunkAt *metav1.MicroTime `json:"shrunkAt,omitempty"`
}

// ReserveStatus is where a quota's reserve went.
type ReserveStatus struct {
	// Broker is the Deployment that runs the permit server.
	Broker string `json:"broker"`
	// Requested is the reserve spec.reserve.permits asks for, in permits.
	Requested int32 `json:"requested"`
	// Permits is the reserve kept out of the division over the workload's
	// pods: Requested, cut to leave every Ready pod of the workload one
	// permit. The broker's Ready replicas hold it once the handover is
	// done; while none is Ready, nobody does.
	Permits int32 `json:"permits"`
	// HandedOut is the permits the published plan gives the broker's
	// replicas.
	HandedOut int32 `json:"handedOut"`
	// Replicas are the broker's pods that are told a slice, may still hold
	// one, or wait for theirs.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Replicas []PodShareStatus `json:"replicas,omitempty"`
}

// DownstreamQuotaStatus is what the operator computed and published.
type DownstreamQuotaStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas holds the replica facts and the divisor.
	// +optional
	Replicas *ReplicaStatus `json:"replicas,omitempty"`
	// PerPod is each pod's share.
	// +optional
	PerPod *PerPodPlan `json:"perPod,omitempty"`
	// Demand compares the expected demand with the plan, when demand is set.
	// +optional
	Demand *DemandStatus `json:"demand,omitempty"`
	// Diagnostics lists the plan's findings.
	// +optional
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	// ConfigMap is where the plan was published.
	// +optional
	ConfigMap *PublishedConfigMap `json:"configMap,omitempty"`
	// Rollout counts the pods that applied the plan.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`
	// Division is how the usable permits are divided over the pods, and
	// where the handover stands.
	// +optional
	Division *DivisionStatus `json:"division,omitempty"`
	// Reserve is where the reserve went, when spec.reserve is set.
	// +optional
	Reserve *ReserveStatus `json:"reserve,omitempty"`
	// Conditions hold Ready and the reasons it is not.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// PodsApplied is "<applied>/<ready>": of the pods that are Ready and
	// not terminating, how many have acknowledged the last published plan
	// revision (condition PlanApplied). Unlike rollout, it leaves out pods
	// that are starting or terminating, as they serve no traffic.
	// +optional
	PodsApplied string `json:"podsApplied,omitempty"`
	// PodPermits is the permits the Ready pods (not terminating) are told
	// in the published plan, the printer column PERMITS/POD: "5" when
	// every one is told 5, "<least>-<most>" when they differ, such as
	// "0-5" while new pods wait for old ones to let go of capacity in a
	// handover, or "5-6" when the usable permits do not divide evenly
	// (status.division.extra pods hold one more); "0" with no Ready pod.
	// Unlike perPod.permits, the base share the division gives a pod once
	// the handover is done, it is what the pods' gates enforce now. With
	// spec.shares.policy Demand the shares follow each pod's demand, so a
	// range such as "1-22" is the normal state, not a handover.
	// +optional
	PodPermits string `json:"podPermits,omitempty"`
}

// DownstreamQuota divides a downstream's global contract over the pods of the
// workload that calls it, and keeps each pod's share current as the workload
// scales.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name: must be at most 63 characters, because pods acknowledge a plan with the annotation applied.backpressure.dev/<name>"
// +kubebuilder:resource:shortName=dq,categories=backpressure
// +kubebuilder:printcolumn:name="Downstream",type=string,JSONPath=`.spec.downstream`
// +kubebuilder:printcolumn:name="Concurrency",type=integer,JSONPath=`.spec.contract.concurrency`
// +kubebuilder:printcolumn:name="Divisor",type=integer,JSONPath=`.status.replicas.divisor`
// +kubebuilder:printcolumn:name="Permits/Pod",type=string,JSONPath=`.status.podPermits`,description="Permits each Ready pod is told now: one number, or the least-most while they differ"
// +kubebuilder:printcolumn:name="Handed-Out",type=integer,JSONPath=`.status.division.handedOut`
// +kubebuilder:printcolumn:name="Usable",type=integer,JSONPath=`.status.division.usable`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workloadRef.name`,priority=1
// +kubebuilder:printcolumn:name="Divisor-Source",type=string,JSONPath=`.status.replicas.divisorSource`,priority=1
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.podsApplied`,description="Ready pods that applied the current plan / Ready pods",priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
type DownstreamQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the contract and the workload it is divided over.
	// +required
	Spec DownstreamQuotaSpec `json:"spec"`
	// Status is what the operator computed and published.
	// +optional
	Status DownstreamQuotaStatus `json:"status,omitempty"`
}

// DownstreamQuotaList is a list of DownstreamQuota.
//
// +kubebuilder:object:root=true
type DownstreamQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the quotas.
	Items []DownstreamQuota `json:"items"`
}
