// Package storm reproduces the 429 storm of the project's story and shows the
// operator preventing it, end to end: a real kube-apiserver (with the
// aggregation layer) and etcd, a real kube-controller-manager whose HPA
// controller decides the scale steps, the manager as a process, one process
// of examples/gateway per simulated pod, a downstream that answers 429
// beyond a global in-flight limit, and open-loop load.
//
// # Where things are
//
//   - storm/cluster: the Kubernetes it runs in (the control plane, the
//     aggregation layer's certificates, the custom metrics API the HPA
//     reads, the processes, the scheduler, kubelet and Service of a
//     workload, the manager and its replicas, the API server's restart).
//   - storm/traffic: the open-loop load and the endpoints it sends to, and
//     the downstream that enforces its contract by answering 429.
//   - storm/observe: what the harness learns from the outside: published
//     plans, rollout, acknowledgements, the pods' applied plans and permits,
//     a shared contract's split.
//   - storm/schedule: a scenario's timeline (load, latency and scale steps,
//     the report's phases).
//   - storm/report: the analysis of a run, the goals' record, the tables,
//     the JSON report files and the plots (drawn by hack/stormplot).
//   - storm (this package): the scenarios, their goals, and the runner that
//     plays them (Harness.Play).
//
// # The scenarios
//
// On the common schedule (DefaultSchedule) the operator, a static share, the
// naive full contract per pod and the operator behind the sidecar proxy
// run in turn (Variants); two scenarios have schedules of their own: the
// laggard (one pod applies every new plan late, and the previous division
// is replayed on the same pod timeline for comparison, see
// report.CapacityReport) and two callers sharing one DownstreamContract
// (TwoCallers), each caller's part worked out by hand. The fault scenarios
// (faults*.go) break the cluster around the operator: the leading manager
// killed, kube-apiserver restarted, finished pods beside the workload's, and
// the calling workload a StatefulSet. The partial-load scenario
// (partial*.go, Harness.RunPartialLoad) runs below capacity instead: 80 %
// of what the 40 usable permits serve, Poisson arrivals with lognormal
// latencies, over 8 pods behind a random balancer or pinned connections,
// with a reserve of 16 lent per call by the permit server
// (cmd/backpressure-broker, run as a pod of its Deployment) and the rest
// divided by the pods' demand (served by the custom metrics API); each call
// goes at once to its pod, to one global gate of the usable permits and to
// its pod's equal share without a reserve (both in-process, the library's
// gate, a downstream that sleeps the call's latency), and the admitted
// calls are compared, and checked against internal/lossmodel's prediction;
// a third run kills the permit server mid-run (partial_kill.go).
//
// # The runner
//
// Every scenario is a Scenario played by Harness.Play, whose stages run in
// order: set up (the callers' namespaces, manifests and objects, the
// downstream), observe (the watches of the operator's plans, the quotas'
// rollout and the pods' acknowledgements, and the first plans), start the
// pods and settle the handover, conduct the timeline (the load, the latency
// and scale steps, the events, a sample every 100 ms), finish (the last
// handover, what was recorded) and tear down (also on error). The analysis
// turns the Recording into a report, and the scenario's goals judge it:
// Harness.Run does that for a Variant on a schedule, Harness.RunCallers for a
// CallersScenario, and the fault scenarios are variants with events.
//
// # Adding a scenario
//
// A scenario is its timeline, its events and its goals:
//
//  1. Its timeline: a schedule.Schedule (duration, load, initial replicas,
//     the replica counts it asks the HPA for, the phases its report
//     summarises), or for callers sharing a contract a CallersScenario.
//  2. Its events, if any: Events at offsets of the timeline, whose Do acts
//     on the Stage (the workloads, their observations, the cluster through
//     Stage.Harness) and may measure what follows; see faults_restart.go.
//  3. Its goals: a func(*report.VariantReport) report.Goals on the Variant,
//     adding its own with Goals.Add and the shared ones with Goals' other
//     methods; see goals.go. A scenario with a report of its own
//     (report-<name>.json) keeps its figures beside it, as the fault
//     scenarios do (faults_report.go).
//
// A Variant with Schedule, Events and Goals set, run with Harness.Run, is a
// whole scenario; one that needs what a Variant cannot say (several
// callers, objects of its own, a shared contract) builds a Scenario,
// plays it and analyses its Recording, as RunCallers does. The e2e suite
// under test/e2e runs it and asserts the goals it cares about; the demo
// program under test/e2e/cmd/storm prints them.
package storm
