// Package runtime is what an application pod imports to enforce the shares
// the backpressure operator computes for it: one call opens the pod's plans,
// makes a gate, a retry budget and optionally a dispatcher for each, and
// keeps them sized as the plans change while calls run.
//
// A service that calls one downstream through a gated HTTP client:
//
//	reg := prometheus.NewRegistry()
//	rt, err := runtime.New(ctx, runtime.FromDir("/etc/backpressure"), runtime.Options{
//		Gates:      []string{"logistics-api"}, // fail at start without a plan for it
//		Registerer: reg,
//		Logger:     logr.FromSlogHandler(slog.Default().Handler()),
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	go rt.Start(ctx) // follows the plans until ctx ends
//
//	logistics := &http.Client{Transport: &httpmw.Transport{Gate: rt.Gate("logistics-api")}}
//	resp, err := logistics.Get("https://logistics.example.com/quote")
//	if errors.Is(err, gate.ErrRejected) {
//		// Shed by this pod's share: answer from a fallback, never retry.
//	}
//
// FromConfigMap(client, namespace, name) follows the ConfigMap through the API
// server instead of a mounted volume, within a second of each change.
//
// # This pod's share
//
// A plan document divides a gate's capacity among the workload's pods: a
// base share, and a share of its own for each pod it names (see package
// plan). The Runtime enforces plan.Document.For(pod), where pod is
// Options.PodName or, by default, $POD_NAME from the downward API; a pod
// the document does not name, or whose name is unknown, enforces the base
// share. Below, "plan" means that view of the document.
//
// # What the Runtime keeps
//
// For every gate the source has a valid plan for, the Runtime keeps
//
//   - a *gate.Gate enforcing GateLimits(plan): permits, rate and burst,
//     waiting room and its bounds, and the typical latency below which a
//     call's remaining deadline is shed at once;
//   - a *retry.Budget refilled at the plan's retryBudgetPerSecond, for
//     retry.Policy.Budget;
//   - a *dispatch.Dispatcher sized by DispatchLimits(plan), for the gates
//     named in Options.Dispatchers.
//
// Each is made once and resized in place on every reload (see gate.Gate.Update
// for what a resize guarantees to calls in flight), so a pointer obtained once
// stays valid. Every plan put in force is logged as "Applied plan" and passed
// to Options.OnApplied.
//
// # Acknowledgement: handing capacity over
//
// The operator moves capacity to a pod only after the pods giving it up
// have acknowledged their smaller share. With Options.Ack, the pod is
// annotated with applied.backpressure.dev/<gate>: "<epoch>/<revision>"
// (plan.Ack) once
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
// When Start's context ends, the Runtime closes every gate (it admits
// nothing ever again), waits up to Options.DrainTimeout (30s) for the calls
// in flight to end, and then, with Options.Ack, annotates the pod with
// "<epoch>/released" for every gate that has drained, trying for up to
// Options.ReleaseTimeout (10s), before Start returns. The operator then
// gives a terminating pod's share to the others without waiting for the pod
// to disappear. So stop taking requests first (http.Server.Shutdown), then
// end Start's context, then exit.
//
// # Missing gates
//
// A gate the service names but the source has no plan for is an error of New
// (matching reload.ErrNoPlan), not a gate that rejects every call: the pod
// fails at start, where a rollout notices it, rather than shedding all of its
// traffic to that downstream. An application that must start without the
// operator gives Options.Bootstrap, a conservative share per gate: when no
// published plan arrives within Options.BootstrapWait the gate runs on it,
// says so in backpressure_config_gate_bootstrap, acknowledges nothing, and
// the first published plan replaces it. A gate whose document disappears
// later keeps its last plan until the process restarts; package reload
// reports it.
//
// # Metrics
//
// The gate, retry budget and dispatcher collectors of package metrics and the
// config reload metrics of package reload are registered with
// Options.Registerer; nil registers none, and the global registry is never
// used.
//
// # What the pod needs
//
// With FromConfigMap, a Role granting get, list and watch on the one
// ConfigMap (resourceNames may name it). The environment variable POD_NAME
// from the downward API, so that the pod enforces its own share. With
// Options.Ack, also patch on pods and POD_NAMESPACE.
package runtime
