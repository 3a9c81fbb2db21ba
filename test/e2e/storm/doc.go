// Package storm reproduces the 429 storm of the project's story and shows the
// operator preventing it, end to end: a real kube-apiserver and etcd, the
// manager as a process, one process of examples/gateway per simulated pod, a
// downstream that answers 429 beyond a global in-flight limit, and an
// autoscaler that changes the replica count while open-loop load runs.
//
// The harness plays the parts of a cluster that the control plane alone does
// not have: the HorizontalPodAutoscaler (it scales the Deployment through the
// scale subresource, then writes the HPA's status), the ReplicaSet, scheduler
// and kubelet (it creates, binds, starts, readies, terminates and finally
// deletes the Pods) and the Service (it sends traffic only to Ready pods).
//
// Besides the common schedule, on which the operator, a static share and the
// naive full contract per pod run in turn, two scenarios have schedules of
// their own: the laggard (one pod applies every new plan late, and the
// previous division is replayed on the same pod timeline for comparison, see
// CapacityReport) and two callers sharing one DownstreamContract (see
// CallersScenario), each caller's part checked against division.FairShare.
//
// The same code runs the Ginkgo suite under test/e2e, which asserts the goals,
// and the demo program under test/e2e/cmd/storm, which prints them.
package storm
