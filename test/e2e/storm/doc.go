// Package storm reproduces the 429 storm of the project's story and shows the
// operator preventing it, end to end: a real kube-apiserver (with the
// aggregation layer) and etcd, a real kube-controller-manager running the
// HPA, Deployment, ReplicaSet, StatefulSet, garbage-collector and
// EndpointSlice controllers, the manager as a process, one process of examples/gateway per
// simulated pod, a downstream that answers 429 beyond a global in-flight
// limit, and open-loop load.
//
// The HPA decides the scale steps: the harness serves
// custom.metrics.k8s.io/v1beta2 through an APIService (MetricsAPI), with
// each pod's demand computed from its gate's metrics, and the schedule only
// moves the downstream's latency (and, for scenarios with scale steps of
// their own, the replica count they ask the HPA for; see DictateHPA).
//
// The harness plays the parts of a cluster that have no process here: the
// scheduler (it binds each new Pod to the one Node), the kubelet (a bound
// Pod's container is a gateway process; the Pod is Running, then Ready once
// the process serves; a deleted Pod's process gets SIGTERM and, once it has
// exited, the Pod is deleted with grace period 0; a StatefulSet's Pod
// created again under its name is a new Pod with a new process) and the
// Service (it sends traffic only to the pods its kubelet saw Ready).
//
// Besides the common schedule, on which the operator, a static share and the
// naive full contract per pod run in turn, two scenarios have schedules of
// their own: the laggard (one pod applies every new plan late, and the
// previous division is replayed on the same pod timeline for comparison, see
// CapacityReport) and two callers sharing one DownstreamContract (see
// CallersScenario), each caller's part checked against division.FairShare.
// The fault scenarios (faults*.go) break the cluster around the operator:
// the leading manager killed, kube-apiserver restarted, finished pods beside
// the workload's, and the calling workload a StatefulSet (see
// StatefulSetSchedule).
//
// The same code runs the Ginkgo suite under test/e2e, which asserts the goals,
// and the demo program under test/e2e/cmd/storm, which prints them.
package storm
