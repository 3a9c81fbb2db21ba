// Package controller reconciles DownstreamQuotas: it divides each quota's
// global contract over the pods of the workload that calls the downstream,
// publishes every pod's share in the workload's ConfigMap, and keeps the
// share current as the workload scales.
//
// # Facts and the divisor
//
// A reconcile reads, from the manager's cache, the workload (a Deployment or
// StatefulSet: spec and status replicas, selector), its HPA (spec.hpaName, or
// the HPA whose scaleTargetRef names the workload; min, max, current and
// desired replicas) and the workload's pods as metadata only
// (metav1.PartialObjectMetadata), counting every pod that still exists,
// terminating ones included. The divisor is the largest of the workload's
// spec replicas, the HPA's desired replicas and the existing pods, and at
// least 1 (chooseDivisor). An HPA writes the workload's spec replicas before
// its own status, so on a scale-up every pod's share shrinks before the new
// pods exist; on a scale-down the share grows only once the departing pods
// are gone. So the pods that exist never hold more than the contract between
// them, as long as each holds the share it was last told. Pods are counted
// by metadata alone, which shows no phase: a finished pod that still exists
// is counted, which errs on the safe side.
//
// The plan comes from internal/quotaplan, the same code path as the CLI.
//
// # Publishing
//
// One ConfigMap per workload (spec.configMapName, or <workload>-backpressure)
// holds one key per quota, plan.KeyFor(quota), whose value is the plan
// document of pkg/runtime/plan. A ConfigMap is the operator's when it carries
// the label app.kubernetes.io/managed-by=backpressure-operator, and it is
// then labelled backpressure.dev/workload=<workload>. The operator never
// writes a ConfigMap without that label, nor one labelled for another
// workload: the quota reports ConfigMapConflict and a Warning event instead.
// The manager's cache holds only labelled ConfigMaps, so a name missing from
// the cache is checked against the API server before the operator claims it,
// and the claim is a Create, which fails rather than adopt a ConfigMap
// someone created in the meantime.
//
// Several quotas write one ConfigMap, concurrently. Each writes its own key
// by server-side apply with a field manager of its own
// ("backpressure-operator/<quota>"): the API server merges the data map key
// by key and the ownerReferences list by UID, so quotas never overwrite each
// other's keys and need no read-modify-write loop, however stale the cache.
// (A strategic merge patch merges the same way and, measured over a cold
// start of 2,000 quotas, costs the API server the same; apply also records
// each quota's ownership of its key in the managed fields.) Removing a key
// is the one read-modify-write: it must not race with the deletion of a
// ConfigMap it emptied, so it writes under the resourceVersion it read.
// A quota applies only when its key's content hash differs from the plan's
// (or its owner reference or the labels are missing), so a reconcile that
// finds nothing new writes nothing. A plan whose content is unchanged keeps
// the published document even when the quota's generation moved on: the
// document's generation is the generation its content was computed from.
//
// Each quota is a non-controller owner of the ConfigMap, so where a garbage
// collector runs, the ConfigMap goes with the last quota even when the
// operator is not running. The operator does not rely on it: when a quota is
// deleted, its delete event starts a reconcile that finds the quota gone and
// withdraws its key from every operator ConfigMap of the namespace (found
// through the ConfigMap gate index), deleting a ConfigMap whose last key it
// removed. The same withdrawal moves a gate when spec.configMapName or the
// workload changes, after the new ConfigMap holds it, so pods are never
// left without their gate. No finalizer is needed: a quota deleted while the
// operator is down is still withdrawn, because the ConfigMap informer's
// initial list enqueues every quota named in an owner reference or a key, and
// quotas never wait on an absent operator to be deleted.
//
// # Conditions
//
// Ready is the one condition. Its reason is the most important finding, in
// this order; the first six make Ready False:
//
//   - WorkloadNotFound: nothing can be computed; the last published plan,
//     if any, stays published and in status.
//   - InvalidSpec: the spec gives no plan (a value the schema let through).
//   - ConfigMapConflict: the target ConfigMap is not the operator's; nothing
//     is written to it. The operator checks again every conflict recheck
//     interval, because the foreign ConfigMap is outside its cache.
//   - HPANotFound: the named HPA does not exist; the plan is published from
//     the other facts.
//   - QuotaTooSmall, Overcommitted, DeadlineBelowLatency: the plan is
//     published but cannot keep the contract or the deadline.
//   - DemandExceedsQuota: Ready stays True; the demand will be partly shed
//     locally, which is what the quota is for, but worth a look.
//   - PlanPublished: Ready True, nothing to report.
//
// Every finding of the plan, with its arithmetic, is also in
// status.diagnostics. Input problems are never retried in a loop: the watches
// on the quota, the workload, the HPA, the pods and the ConfigMaps start the
// next reconcile when the missing object appears.
//
// The status is written once per reconcile, only when it differs
// (equality.Semantic), and a Normal event PlanChanged with the arithmetic
// ("permits 5→2: divisor 8→16 (workload spec replicas); 50 × 80% / 16 = 2.5")
// follows every change of the published plan.
//
// # Rollout
//
// The runtime library acknowledges a plan by annotating its pod with
// applied.backpressure.dev/<quota>: <hash>. status.rollout counts the
// existing pods whose annotation carries the published hash and names up to
// ten that do not yet.
package controller
