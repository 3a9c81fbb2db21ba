// Package backpressure is what an application pod imports to enforce the shares
// the backpressure operator computes for it: one call opens the pod's plans,
// makes a gate, a retry budget and optionally a dispatcher for each, and
// keeps them sized as the plans change while calls run.
//
// The one way to use it, as the package's Example shows in full:
//
//	rt, err := backpressure.New(ctx, backpressure.FromDir("/etc/backpressure"), backpressure.Options{
//		Gates:      []string{"logistics-api"}, // no plan for it: New fails, at start
//		Registerer: reg,                       // the registry the pod's /metrics serves
//	})
//	if err != nil {
//		return err
//	}
//	logisticsGate, err := rt.Gate("logistics-api") // once, at start
//	if err != nil {
//		return err
//	}
//	client := &http.Client{Transport: &httpmw.Transport{Gate: logisticsGate}}
//	started := make(chan error, 1)
//	go func() { started <- rt.Start(follow) }() // follows the plans until follow ends
//
//	resp, err := client.Do(req)
//	if errors.Is(err, gate.ErrRejected) {
//		// Shed by this pod's share, never sent: answer from a fallback, never retry.
//	}
//	...
//	stopFollowing() // after http.Server.Shutdown
//	err = <-started // nil once drained and handed back
//
// FromConfigMap(client, namespace, name) follows the ConfigMap through the API
// server instead of a mounted volume, within a second of each change.
//
// # This pod's share
//
// A published plan divides a gate's capacity among the workload's pods: a
// base share, and a share of its own for each pod it names. The Runtime
// enforces this pod's share, the pod being Options.PodName or, by default,
// $POD_NAME from the downward API; a pod the plan does not name, or whose
// name is unknown, enforces the base share, which Runtime.Share returns as a
// Share.
//
// # What the Runtime keeps
//
// For every gate the source has a valid plan for, the Runtime keeps
//
//   - a *gate.Gate enforcing Share.Limits: permits, rate and burst,
//     waiting room and its bounds, and the typical latency below which a
//     call's remaining deadline is shed at once;
//   - a *retry.Budget refilled at Share.RetryBudgetPerSecond, for
//     retry.Policy.Budget;
//   - a *dispatch.Dispatcher with Share.Workers workers and a queue as large
//     as the waiting room, for the gates named in Options.Dispatchers; the
//     application submits its tasks to it, which is why package dispatch
//     is public.
//
// Each is made once and resized in place on every reload (see gate.Gate.Update
// for what a resize guarantees to calls in flight), so a pointer obtained once
// stays valid. Every plan put in force is logged as "Applied plan" and passed
// to Options.OnApplied. A lapse of the plan's source and its end (below)
// are logged as "Applied plan" too, with the plan's hash and the permits
// then in force, so that those lines always tell what the gate enforces;
// they are not passed to OnApplied, since the plan has not changed.
//
// # Acknowledgement: handing capacity over
//
// The operator moves capacity to a pod only after the pods giving it up
// have acknowledged their smaller share. With Options.Ack, the pod is
// annotated with applied.backpressure.dev/<gate>: "<epoch>/<revision>"
// once
//
//   - the gate enforces that revision, and
//   - the calls in flight on the gate are within the permits the revision
//     gives this pod.
//
// A smaller share never pre-empts calls in flight (see gate.Gate.Update):
// the gate admits nobody new until enough calls have ended, and the
// Runtime, which polls the gate's in-flight count every 10ms while a
// revision waits, acknowledges it then. A larger or equal share is
// acknowledged at once. A newer revision supersedes one still waiting, so
// the annotation always names the newest revision the pod enforces within
// its share.
//
// # Shutdown: releasing the shares
//
// When Start's context ends, the Runtime lets every dispatcher run its
// queued tasks and stops its workers, closes every gate (it admits nothing
// ever again), waits, all within Options.DrainTimeout (30s), for the calls
// in flight to end, and then, with Options.Ack, annotates the pod with
// "<epoch>/released" for every gate that has drained, trying for up to
// Options.ReleaseTimeout (10s), before Start returns. The operator then
// gives a terminating pod's share to the others without waiting for the pod
// to disappear. When Start returns, nothing the Runtime started is still
// running. So stop taking requests first (http.Server.Shutdown), then end
// Start's context, wait for Start, then exit.
//
// # Missing gates
//
// A missing gate has one rule, here and in packages httpmw and grpcmw: it
// is an error where the gate is named, never a gate that rejects every call
// nor one that lets every call through.
//
//   - A gate named in Options.Gates or Options.Dispatchers that the source
//     has no plan for is an error of New (matching ErrNoPlan): the pod
//     fails at start, where a rollout notices it, rather than shedding all
//     of its traffic to that downstream.
//   - Gate, Budget, Dispatcher and Plan return an error matching ErrNoPlan
//     for any other name without a plan, a misspelt one say. Look the gates
//     up once, after New, and fail the start on an error.
//   - The middleware take the *gate.Gate, not a name, and treat a nil one
//     as a programming error: httpmw.Middleware and grpcmw.Fixed panic when
//     given one, an httpmw.Transport without one panics on its first call,
//     and a gRPC interceptor panics when its Selector gates a call with
//     nil. A call goes ungated only where a grpcmw.Selector says so.
//
// An application that must start without the operator gives
// Options.Bootstrap, a conservative share per gate: when no published plan
// arrives within Options.BootstrapWait the gate runs on it, says so in
// backpressure_config_gate_bootstrap, acknowledges nothing, and the first
// published plan replaces it. A gate whose document disappears later keeps
// its last plan until the process restarts
// (backpressure_config_gate_orphaned), and one whose document is rejected
// keeps its last good plan (backpressure_config_gate_rejected).
//
// A gate that does not acknowledge, read with FromConfigMap, lapses to a
// share of 0 once its source has not confirmed the plan for the operator's
// unacknowledged delay, which the plan carries, less
// Options.SourceLapseMargin and the plan's deadline: the operator hands
// its share to others after that delay, and the pod may have missed the
// smaller share. It says so in its log (and logs "Applied plan" with 0
// permits) and in backpressure_plan_source_lapsed, and enforces its share
// again as soon as the source confirms a plan (logging "Applied plan" with
// the share's permits). FromDir gives no such signal and does not
// lapse; a gate that acknowledges never needs to.
//
// # Metrics
//
// The metrics of the gates, retry budgets, dispatchers and plan sources
// (backpressure_gate_*, backpressure_retry_*, backpressure_dispatcher_*,
// backpressure_config_*; see docs/operating.md) are registered with
// Options.Registerer; nil registers none, and the global registry is never
// used.
//
// # What the pod needs
//
// With FromConfigMap, a Role granting get, list and watch on the one
// ConfigMap (resourceNames may name it). The environment variable POD_NAME
// from the downward API, so that the pod enforces its own share. With
// Options.Ack, also patch on pods and POD_NAMESPACE.
package backpressure
