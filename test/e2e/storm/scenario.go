//go:build unix

package storm

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// Scenario is what the runner runs (Harness.Play): one downstream on a
// timeline, the workloads that call it, and the events of the timeline.
// Harness.Run makes one of a Variant and its schedule, Harness.RunCallers
// of a CallersScenario.
type Scenario struct {
	// Name names the run in the logs and its directories: logs/<Name>,
	// manifests/<Name>, plans/<Name>.
	Name string
	// Duration is how long the load runs.
	Duration time.Duration
	// Latency are the downstream's latency steps; the first is at 0.
	Latency []schedule.LatencyStep
	// PodStartDelay stands for scheduling and container start.
	PodStartDelay time.Duration
	// Callers are the workloads calling the downstream, each in a namespace
	// of its own.
	Callers []Caller
	// Objects are applied with kubectl, once the callers' namespaces exist,
	// before their workloads are read; a cluster-scoped one is deleted
	// again at the end (namespaced ones go with the namespace's workload).
	Objects []client.Object
	// Contract, when set, names the DownstreamContract the callers share:
	// its split over them is sampled with the rest.
	Contract string
	// Events happen at their offsets while the load runs, after the
	// latency and scale steps of the same offset.
	Events []Event
}

// Caller is one workload of a scenario: a Deployment or a StatefulSet and
// its HPA, its pods, their plan, and the load sent to its Ready pods.
type Caller struct {
	// Name is the workload's and its HPA's name, Namespace its own.
	Name, Namespace string
	// NamespaceLabels label the namespace when it is created.
	NamespaceLabels map[string]string
	// Kind is cluster.KindDeployment (when empty) or cluster.KindStatefulSet.
	Kind string
	// Manifests are files kubectl applies in Namespace, before Objects.
	Manifests []string
	// Gate is the gate the pods enforce: the DownstreamQuota's name.
	Gate string
	// ConfigMap is where the operator publishes the pods' plan, which they
	// read through the API and acknowledge. Without it the pods read Plan
	// from a directory, as a mounted ConfigMap.
	ConfigMap string
	Plan      *plan.Document
	// Program is the pod's program (examples/gateway's command line).
	Program string
	// Laggard, when positive, makes the first pod started apply every new
	// plan that much later.
	Laggard time.Duration
	// RequestsPerSecond is the open-loop load over the Ready pods.
	RequestsPerSecond float64
	// InitialReplicas run before the load starts; Scale are the replica
	// counts the scenario asks the HPA for (cluster.DictateHPA).
	InitialReplicas int32
	Scale           []schedule.ScaleStep
	// Holds, with ConfigMap, is what the Ready pods hold together once the
	// handover settled (the usable permits of a quota's own contract, or
	// the caller's part of a shared one): the load starts from there.
	Holds int
}

// Event is something that happens while the load runs: a fault in the
// cluster, a change of an object, a measurement.
type Event struct {
	At   time.Duration
	Name string
	// Do does it. It may block (the later events of the timeline wait)
	// and may start goroutines that measure what follows.
	Do func(ctx context.Context, st *Stage) error
}

// Stage is a scenario while it runs: what an event acts on and observes.
type Stage struct {
	Harness    *Harness
	Downstream *traffic.Downstream
	// Callers are in the scenario's order.
	Callers []*CallerStage
	// Start is the moment the load started; offsets count from it.
	Start time.Time
}

// CallerStage is one caller while the scenario runs.
type CallerStage struct {
	Caller
	Observations *observe.Observations
	Workload     *cluster.Workload
	Endpoints    *traffic.Endpoints
	// laggard names the pod that applies plans late, once started.
	laggard laggard
}

// Offset returns t as an offset from the start of the load.
func (st *Stage) Offset(t time.Time) time.Duration { return t.Sub(st.Start) }

// Workload returns the first caller's workload: a variant's only one.
func (st *Stage) Workload() *cluster.Workload { return st.Callers[0].Workload }

// Observations returns the first caller's observations.
func (st *Stage) Observations() *observe.Observations { return st.Callers[0].Observations }

// Namespace returns the first caller's namespace.
func (st *Stage) Namespace() string { return st.Callers[0].Namespace }

// Recording is what a scenario's run recorded, for its analysis.
type Recording struct {
	// Start is when the load started.
	Start time.Time
	// Samples are taken every report.SampleInterval from offset 0.
	Samples []report.CallersSample
	// Final is the downstream's counters after the last request ended.
	Final traffic.DownstreamCounts
	// Callers are in the scenario's order.
	Callers []CallerRecording
	// Contract is the shared contract's last status, when the scenario
	// names one.
	Contract *v1alpha1.DownstreamContractStatus
}

// CallerRecording is what a run recorded of one caller.
type CallerRecording struct {
	// Load is what the caller's load saw.
	Load *traffic.LoadResult
	// Scales are the HPA's decisions for the workload, as they happened.
	Scales []cluster.ScaleEvent
	// Alive names the pods running at the end of the load.
	Alive []string
	// Published, Applied and Rollout are the observations of the plans
	// (Published and Rollout are empty without the operator), Acks each
	// pod's applied annotation at the end.
	Published []observe.Published
	Applied   []observe.Applied
	Rollout   []observe.RolloutSample
	Acks      map[string]string
	// Laggard names the pod that applied plans late, if any.
	Laggard string
	// PermitsCheck compares the running pods' logged permits with their
	// gates' metrics at the end (with the operator only).
	PermitsCheck *observe.PermitsCheck
}
