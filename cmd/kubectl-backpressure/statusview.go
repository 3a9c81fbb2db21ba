package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// statusViewVersion is the apiVersion of the status view. It is the
// plugin's own: the API server neither stores nor serves it, and its group
// says so.
const statusViewVersion = "kubectl.backpressure.dev/v1alpha1"

// statusViewKind is the kind of one quota's status view.
const statusViewKind = "QuotaStatus"

// quotaStatus is what `status -o json|yaml|jsonpath` prints for one quota:
// the quota's status joined with its pods' acknowledgements, which no
// single API object holds. Scripts depend on these names.
type quotaStatus struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata names the quota.
	Metadata statusMeta `json:"metadata"`
	// Downstream is spec.downstream.
	Downstream string `json:"downstream"`
	// Workload is the workload's Kind/name.
	Workload string `json:"workload"`
	// Contract is the contract the permits come from.
	Contract contractView `json:"contract"`
	// Divisor is the replica count the usable permits are divided by, and
	// the facts it was chosen from; nil before the operator computed one.
	Divisor *v1alpha1.ReplicaStatus `json:"divisor"`
	// Division is status.division without its pods (see Pods); nil before
	// the operator divided the permits.
	Division *divisionView `json:"division"`
	// PodPermits is status.podPermits, kubectl get's PERMITS/POD: what
	// the Ready pods are told now, "20", or "0-20" while they differ.
	PodPermits string `json:"podPermits"`
	// Pods are the workload's pods that have not finished and the pods the
	// division still counts, by name.
	Pods []podView `json:"pods"`
	// Applied counts the pods of Pods that exist and applied the current
	// revision; Total the pods that exist.
	Applied int `json:"applied"`
	Total   int `json:"total"`
	// AllApplied is set when every existing pod applied the current
	// revision: the answer to "has every pod applied its share?".
	AllApplied bool `json:"allApplied"`
	// Reserve is where the quota's reserve went, when it asks for one.
	Reserve *reserveView `json:"reserve,omitempty"`
	// Ready and HandedOver are the quota's conditions of those types.
	Ready      *conditionView `json:"ready"`
	HandedOver *conditionView `json:"handedOver"`
	// Diagnostics are status.diagnostics.
	Diagnostics []v1alpha1.Diagnostic `json:"diagnostics"`
	// ConfigMap is where the plan is published.
	ConfigMap *v1alpha1.PublishedConfigMap `json:"configMap,omitempty"`
	// Problems are what the plugin could not read, such as a missing
	// workload.
	Problems []string `json:"problems,omitempty"`
}

type statusMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// contractView is the quota's own contract, or the shared one it names.
type contractView struct {
	// Shared names the DownstreamContract of spec.contractRef.
	Shared        string `json:"shared,omitempty"`
	Concurrency   int32  `json:"concurrency"`
	RatePerSecond int32  `json:"ratePerSecond,omitempty"`
	Burst         int32  `json:"burst,omitempty"`
	// ClusterConcurrency is this cluster's part of Concurrency when the
	// contract has a clusterShare.
	ClusterConcurrency int32 `json:"clusterConcurrency,omitempty"`
	SafetyPercent      int32 `json:"safetyPercent"`
	// Usable is floor(concurrency (or this cluster's part) × safety): the
	// permits to hand out, over every caller for a shared contract.
	Usable int64 `json:"usable"`
}

type divisionView struct {
	Epoch     string `json:"epoch"`
	Revision  int64  `json:"revision"`
	Usable    int32  `json:"usable"`
	Base      int32  `json:"base"`
	Extra     int32  `json:"extra"`
	HandedOut int32  `json:"handedOut"`
	Held      int32  `json:"held"`
}

// podView is one pod's share and whether it applied it.
type podView struct {
	Name string `json:"name"`
	// Exists is false for a pod that is gone but whose share the division
	// still counts (it never acknowledged its release).
	Exists      bool `json:"exists"`
	Ready       bool `json:"ready"`
	Terminating bool `json:"terminating,omitempty"`
	// Permits is the share the published plan tells the pod; Target and
	// Holds are the division's (see PodShareStatus).
	Permits int32  `json:"permits"`
	Target  *int32 `json:"target,omitempty"`
	Holds   *int32 `json:"holds,omitempty"`
	// Acknowledged is the pod's applied.backpressure.dev/<quota>
	// annotation as written.
	Acknowledged string `json:"acknowledged,omitempty"`
	// Applied is set when Acknowledged is the current epoch and revision.
	Applied bool `json:"applied"`
}

// reserveView is status.reserve with the broker's replicas as pods are
// shown, and the Reserved condition.
type reserveView struct {
	// Broker is the Deployment that runs the permit server.
	Broker string `json:"broker"`
	// Requested, Permits and HandedOut are status.reserve's: the reserve
	// asked for, kept out of the pods' division, and given to replicas.
	Requested int32 `json:"requested"`
	Permits   int32 `json:"permits"`
	HandedOut int32 `json:"handedOut"`
	// Replicas are the broker's pods that have not finished and the
	// replicas the division still counts, by name; Applied is of the
	// quota's revision, as for its pods.
	Replicas []podView `json:"replicas"`
	// Reserved is the quota's condition of that type.
	Reserved *conditionView `json:"reserved"`
}

type conditionView struct {
	Status  metav1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason"`
	Message string                 `json:"message"`
}

// GetObjectKind implements runtime.Object, for the cli-runtime printers.
func (s *quotaStatus) GetObjectKind() schema.ObjectKind { return &s.TypeMeta }

// DeepCopyObject implements runtime.Object.
func (s *quotaStatus) DeepCopyObject() runtime.Object {
	out := &quotaStatus{}
	copyThroughJSON(s, out)
	return out
}

// statusList is several quotas' views, printed as kubectl prints several
// objects: a v1 List.
type statusList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []*quotaStatus `json:"items"`
}

// GetObjectKind implements runtime.Object.
func (l *statusList) GetObjectKind() schema.ObjectKind { return &l.TypeMeta }

// DeepCopyObject implements runtime.Object.
func (l *statusList) DeepCopyObject() runtime.Object {
	out := &statusList{}
	copyThroughJSON(l, out)
	return out
}

// copyThroughJSON copies a view, which holds only JSON-encodable values,
// into out.
func copyThroughJSON(in, out any) {
	data, err := json.Marshal(in)
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		// The views hold only strings, numbers, booleans and API
		// structs that encode both ways.
		panic(fmt.Sprintf("kubectl-backpressure: copy a status view: %v", err))
	}
}

// quotaFacts are what the status view of one quota is built from.
type quotaFacts struct {
	quota *v1alpha1.DownstreamQuota
	// contract is the shared DownstreamContract, when the quota names one
	// and it could be read.
	contract *v1alpha1.DownstreamContract
	// pods are the workload's pods; nil when the workload is not found.
	pods []corev1.Pod
	// brokerPods are the pods of the permit server's Deployment, when the
	// quota has a reserve.
	brokerPods []corev1.Pod
	problems   []string
}

// buildStatus joins a quota's status with its pods' acknowledgements.
func buildStatus(f quotaFacts) *quotaStatus {
	q := f.quota
	st := q.Status
	v := &quotaStatus{
		TypeMeta:    metav1.TypeMeta{APIVersion: statusViewVersion, Kind: statusViewKind},
		Metadata:    statusMeta{Name: q.Name, Namespace: q.Namespace},
		Downstream:  q.Spec.Downstream,
		Workload:    q.Spec.WorkloadRef.Kind + "/" + q.Spec.WorkloadRef.Name,
		Contract:    contractOf(q, f.contract),
		Divisor:     st.Replicas,
		PodPermits:  st.PodPermits,
		Ready:       conditionOf(st.Conditions, v1alpha1.ConditionReady),
		HandedOver:  conditionOf(st.Conditions, v1alpha1.ConditionHandedOver),
		Diagnostics: st.Diagnostics,
		ConfigMap:   st.ConfigMap,
		Problems:    f.problems,
		Pods:        []podView{},
	}
	if v.Diagnostics == nil {
		v.Diagnostics = []v1alpha1.Diagnostic{}
	}
	var current plan.Ack
	shares := map[string]v1alpha1.PodShareStatus{}
	if d := st.Division; d != nil {
		v.Division = &divisionView{Epoch: d.Epoch, Revision: d.Revision, Usable: d.Usable, Base: d.Base, Extra: d.Extra, HandedOut: d.HandedOut, Held: d.Held}
		current = plan.Ack{Epoch: d.Epoch, Revision: d.Revision}
		for _, p := range d.Pods {
			shares[p.Name] = p
		}
	}
	key := v1alpha1.AppliedAnnotationPrefix + q.Name
	// views are the pods that have not finished, with their shares.
	views := func(pods []corev1.Pod, shares map[string]v1alpha1.PodShareStatus) []podView {
		out := []podView{}
		for i := range pods {
			pod := &pods[i]
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			pv := podView{Name: pod.Name, Exists: true, Ready: podIsReady(pod), Terminating: pod.DeletionTimestamp != nil}
			if s, ok := shares[pod.Name]; ok {
				pv.Permits, pv.Target, pv.Holds = s.Permits, s.Target, s.Holds
				delete(shares, pod.Name)
			}
			pv.Acknowledged = pod.Annotations[key]
			if a, err := plan.ParseAck(pv.Acknowledged); err == nil && v.Division != nil && a == current {
				pv.Applied = true
			}
			out = append(out, pv)
		}
		return out
	}
	// The broker's replicas are members of the division too, shown apart.
	if r := st.Reserve; r != nil && q.Spec.Reserve != nil {
		replicas := map[string]v1alpha1.PodShareStatus{}
		for _, p := range r.Replicas {
			replicas[p.Name] = p
			delete(shares, p.Name)
		}
		v.Reserve = &reserveView{Broker: r.Broker, Requested: r.Requested, Permits: r.Permits, HandedOut: r.HandedOut,
			Reserved: conditionOf(st.Conditions, v1alpha1.ConditionReserved)}
		own := map[string]bool{}
		for _, p := range f.pods {
			own[p.Name] = true
		}
		brokers := slices.DeleteFunc(slices.Clone(f.brokerPods), func(p corev1.Pod) bool { return own[p.Name] })
		v.Reserve.Replicas = views(brokers, replicas)
		v.Reserve.Replicas = append(v.Reserve.Replicas, gone(r.Replicas, replicas)...)
	}
	v.Pods = views(f.pods, shares)
	for _, p := range v.Pods {
		v.Total++
		if p.Applied {
			v.Applied++
		}
	}
	// Pods the division counts that no longer exist (or were not listed,
	// as when the workload is gone) still hold what they were told.
	if st.Division != nil {
		v.Pods = append(v.Pods, gone(st.Division.Pods, shares)...)
	}
	v.AllApplied = v.Division != nil && v.Total > 0 && v.Applied == v.Total
	return v
}

// gone returns the views of the members of all that are still in left:
// those no listed pod took.
func gone(all []v1alpha1.PodShareStatus, left map[string]v1alpha1.PodShareStatus) []podView {
	var out []podView
	for _, s := range all {
		if _, ok := left[s.Name]; ok {
			out = append(out, podView{Name: s.Name, Permits: s.Permits, Target: s.Target, Holds: s.Holds})
		}
	}
	return out
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func contractOf(q *v1alpha1.DownstreamQuota, dc *v1alpha1.DownstreamContract) contractView {
	spec := quota.Default(q.Spec)
	switch {
	case spec.Contract != nil:
		c := *spec.Contract
		v := contractView{Concurrency: c.Concurrency, RatePerSecond: c.RatePerSecond, Burst: c.Burst, SafetyPercent: spec.SafetyPercent}
		cc := quota.ClusterConcurrency(c)
		if cc != c.Concurrency {
			v.ClusterConcurrency = cc
		}
		v.Usable = int64(cc) * int64(spec.SafetyPercent) / 100
		return v
	case spec.ContractRef != nil && dc != nil:
		c := dc.Spec.Contract
		v := contractView{Shared: dc.Name, Concurrency: c.Concurrency, RatePerSecond: c.RatePerSecond, Burst: c.Burst, Usable: quota.ContractUsable(dc.Spec)}
		if cc := quota.ClusterConcurrency(c); cc != c.Concurrency {
			v.ClusterConcurrency = cc
		}
		v.SafetyPercent = dc.Spec.SafetyPercent
		if v.SafetyPercent == 0 {
			v.SafetyPercent = quota.DefaultSafetyPercent
		}
		return v
	case spec.ContractRef != nil:
		return contractView{Shared: spec.ContractRef.Name}
	}
	return contractView{}
}

func conditionOf(conds []metav1.Condition, t string) *conditionView {
	c := apimeta.FindStatusCondition(conds, t)
	if c == nil {
		return nil
	}
	return &conditionView{Status: c.Status, Reason: c.Reason, Message: c.Message}
}

// appliedText says whether a pod applied the current revision, and what
// it acknowledged instead when it did not.
func appliedText(p podView, div *divisionView) string {
	switch {
	case !p.Exists:
		return "gone"
	case p.Applied:
		return "yes"
	case p.Acknowledged == "":
		return "no: nothing acknowledged"
	}
	a, err := plan.ParseAck(p.Acknowledged)
	switch {
	case err != nil:
		return fmt.Sprintf("no: %q is not <epoch>/<revision>", p.Acknowledged)
	case div == nil:
		return "no: no division yet"
	case a.Epoch != div.Epoch:
		return "no: another epoch"
	case a.Released:
		return "no: released"
	}
	return fmt.Sprintf("no: revision %d", a.Revision)
}

// pendingNames lists the existing pods that have not applied the current
// revision.
func pendingNames(v *quotaStatus) string {
	var out []string
	for _, p := range v.Pods {
		if p.Exists && !p.Applied {
			out = append(out, p.Name)
		}
	}
	return strings.Join(out, ", ")
}
