// Package reload delivers a workload's plans, as published by the
// backpressure operator, to the code that enforces them, and keeps them
// current while the process runs. Updates carry the whole documents; the
// subscriber picks its own pod's share (plan.Document.For).
//
// Two sources read the same documents (see package plan) with the same
// validation: ConfigMapSource follows the ConfigMap through the API server
// (sub-second), DirSource follows the ConfigMap mounted as a volume
// (fsnotify plus polling; the kubelet itself refreshes volumes only after up
// to a minute or more). Both
//
//   - read once when created and return an error when there is nothing
//     valid to enforce, so a misconfigured pod fails at start;
//   - then deliver an Update to their Subscriber whenever a gate's plan
//     changes, starting with every plan when Start is called;
//   - reject a bad document (unparseable, unknown version, out of range, a
//     key and gate that disagree) and keep that gate's last good plan,
//     counting backpressure_config_reloads_total{result="error"} and
//     logging once per distinct bad content, not once per read;
//   - keep the last plan of a gate whose document disappears, until the
//     process restarts, and report it in Update.Orphaned and in the gauge
//     backpressure_config_gate_orphaned{gate} = 1;
//   - report a gate whose present document is rejected in the gauge
//     backpressure_config_gate_rejected{gate} = 1, until a valid document
//     replaces it (0);
//   - skip reads whose content did not change;
//   - export backpressure_config_plan_info{gate,hash} = 1 for the plan in
//     force, through a Registerer the caller injects (nil: no metrics are
//     registered; the global registry is never used);
//   - optionally acknowledge each plan by annotating their own pod with
//     applied.backpressure.dev/<gate>: "<epoch>/<revision>" once
//     Options.Enforced says the pod enforces it within its share, and
//     with "<epoch>/released" on Release (see AckOptions and plan.Ack).
//
// Start blocks until its context ends, like controller-runtime's
// certwatcher, which this package follows.
package reload
