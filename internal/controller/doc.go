// Package controller reconciles DownstreamQuotas and DownstreamContracts:
// it divides each contract's usable permits over the Ready pods of the
// workloads that call the downstream, exactly, hands capacity over between
// pods only as they acknowledge giving it up, publishes every pod's share in
// its workload's ConfigMap, and keeps the shares current as the workloads
// scale.
//
// # Facts
//
// A reconcile reads, from the manager's cache, the workload (a Deployment or
// StatefulSet: spec and status replicas, selector), its HPA (spec.hpaName, or
// the HPA whose scaleTargetRef names the workload) and the workload's pods.
// Pods are cached stripped (stripPod, see CacheOptions): their metadata
// (labels, the acknowledgement annotations, the deletion timestamp), their
// phase and their Ready condition, nothing else. The divisor is the number
// of serving pods: Ready, neither terminating nor finished (Succeeded or
// Failed). Pods that are not Ready receive no traffic and need no share
// until they are; pods that are terminating keep what they hold through the
// handover below. The workload's replicas, the HPA's figures and the pods
// that exist are reported in status.replicas for people; divisorSource is
// ReadyPods and they do not decide a share.
//
// # Exact division
//
// The plan comes from internal/quota, the same code path as the CLI.
// Its usable permits are A = floor(C' × safety), C' being the contract's
// concurrency or, with contract.clusterShare, this cluster's part of it.
// With D serving pods every pod is to hold floor(A/D) and A mod D of them
// one more, so the pods hold exactly A (package division: the extra permits
// stay with the pods that already hold the most). With fewer permits than
// pods, Strict gives A pods one permit and the others none (QuotaTooSmall);
// AtLeastOne gives every serving pod one (Overcommitted). Each pod's queue,
// workers, rate, burst and retry budget follow its own permits.
//
// The published document (api/plan, version 2) names every pod that
// is told a share, and its base share, for a pod it does not name, is 0: a
// pod the operator has not granted anything holds nothing.
//
// # Handover and the write-ahead record
//
// Each reconcile runs one step of handover.Step over the division's pods.
// A smaller share is told at once; the pod is counted at its old share
// (status.division.holding) until it acknowledges a revision at least as
// new as the one that shrank it, or, when it does not acknowledge, until
// spec.handover.unacknowledgedDelay (150s by default,
// DefaultUnacknowledgedDelay) has passed since the ConfigMap was seen
// holding that revision. A larger share is granted only out of what no pod
// is told or may still hold. A terminating pod keeps its share until it is
// gone or it acknowledges "<epoch>/released".
//
// Whether a pod acknowledges is declared by its annotation
// backpressure.dev/acknowledges ("true" or "false", set in the pod
// template): a pod that declares it acknowledges is never taken to have
// let go of a share by time. Without the annotation it is inferred: a pod
// that has acknowledged a revision of the epoch acknowledges, and the
// record of its pending shrink remembers it.
//
// Acknowledgements are the pods' applied.backpressure.dev/<quota>
// annotations, parsed by plan.ParseAck; one of another epoch counts as none,
// and one of a revision the division has not reached acknowledges nothing.
// The epoch is the UID of the object that owns the division (the quota, or
// the shared contract), and the revision grows with every published change
// and is never published twice (handover.Resume).
//
// What every pod is told and may still hold is the operator's only memory of
// capacity that is out, so it is written before any pod is told: when a step
// changes it, the reconcile first writes it to status.division (told and
// holding), under the resourceVersion of the object it read (an optimistic
// lock), and only then publishes. A quota's reconcile writes the rest of its
// status in that same write, as it will stand once the document is
// published, rather than in a second one after it; should the publication
// fail, the reconcile fails and its retry publishes. (A contract keeps its
// record on the contract and writes each quota's status after publishing.)
// A restarted or newly elected operator reads the record back, and starts
// every pending delay again on its own clock (status.division.clock names
// the process that stamped it). When that write conflicts, the cache held an
// older object than the API server: the step was computed from an old record
// and would forget what some pod was told since. The reconcile then writes
// nothing more, neither the ConfigMap nor the rest of the status, and runs
// again 50ms later, when the cache has caught up; no later status write
// carries a division other than the one the API server holds, and no
// document goes out over a newer revision of its epoch. A step that changes
// nothing in the record writes no record. The reconcile asks to run again
// when a delay or a stall deadline passes, as no watch would fire then.
//
// A record that is missing, of another epoch, or behind what the
// ConfigMaps and the pods' acknowledgements show starts afresh: above every
// revision of its epoch seen, and taking every pod to hold what the
// documents its pods read, and the quota's record of another epoch, give
// it, until it acknowledges the new revision or the delay passes.
//
// # Pods that leave a division
//
// A pod the record counts is not forgotten because it left: its caller no
// longer lists it (it was relabelled out of the workload's selector, the
// quota now names another workload), its object is gone (a force deletion,
// with its process perhaps still running), or its caller left the division
// (its namespace was turned away, its workload deleted without its pods,
// its part could not be computed, its quota deleted or pointed elsewhere).
// Such a pod is looked up by name and stays in the division with a target
// of 0: it is told 0 in every ConfigMap of its namespace that holds its
// gate, and counted at what it may hold until it acknowledges that, or the
// delay passes (for a pod whose object is gone, from when it was found
// gone). A quota whose gate goes to other ConfigMaps than its own keeps
// publishing there until no pod that reads them is counted, and is only
// then withdrawn from them. A caller whose document the division can no
// longer write (its quota deleted, or now dividing elsewhere) keeps its pods
// counted until they release their share or are gone.
//
// # Size
//
// A division's record must fit in its object: when told and holding would
// take more than 1 MiB of JSON (maxRecordBytes), or a document more than
// its ConfigMap has room for (the API server's 1 MiB of data, less the
// other gates'), nothing of the step is recorded or published, the pods keep
// the last plan that was, and Ready is False with reason DivisionTooLarge.
//
// # Shared contracts
//
// A quota with spec.contractRef names a cluster-scoped DownstreamContract
// instead of a contract of its own. Its own reconcile only checks that the
// contract exists and that the contract's namespaceSelector admits the
// quota's namespace (a contract without one admits none), and otherwise
// sets Ready False with reason
// ContractNotFound (the last published plan stays). The
// DownstreamContractReconciler does the rest, per contract: it lists the
// quotas naming it (through the contract index) and reads each one's facts.
// A caller that may no longer take part (being deleted, its namespace not
// admitted by the selector, its workload gone) stays in the division with a
// part of 0, its pods told 0, until they let go of what they hold; the
// others split the contract's usable permits with quota.Split: over their namespaces first, each weighing its quotas'
// weights together capped at the contract's maxWeightPerNamespace, then
// within each namespace, each time by weighted max-min fairness capped at each
// caller's demand (spec.demand.inFlight, or demand.ratePerSecond × typical
// latency rounded up; none stated is unbounded), a caller without serving
// pods getting nothing. The rate is split the same way; each caller's burst
// follows its part of the rate and its retry budget its part of the
// permits. Each caller's part is then divided exactly over its pods, and one
// handover runs over the pods of every caller against the contract's usable
// total, so capacity moves between callers only as the pods giving it up
// acknowledge. Pods are keyed "<namespace>/<quota>/<pod>" in the contract's
// status.division, the write-ahead record of that handover, so that two
// quotas of one workload (two gates to one provider) are two callers; each
// caller's document goes to its own ConfigMap, each quota's status gets its
// part (status.division with its own pods), and the contract's status lists
// the first 100 callers with their parts and the reason for each. The
// contract reconciler runs on changes of the contract's spec, of the quotas
// naming it, of their workloads, pods and ConfigMaps (a hand-edited document
// is put back), and of namespace labels, which decide what a contract's
// namespaceSelector admits: a quota whose namespace stops matching reports
// ContractNotFound and its pods are told 0.
//
// The DownstreamQuota and DownstreamContract reconcilers share one
// Publisher: the client, the clock, the event recorder, the record's
// writes, the publication of a quota's document and its withdrawal, and
// the status conditions. A quota's document is published by the same code
// whoever owns its division.
//
// # Quotas that name one downstream without sharing a contract
//
// A quota with a contract of its own also looks at every other quota and
// contract naming the same spec.downstream (through the downstream index):
// quotas that share a contract count through that contract. When there are
// at least two and their usable totals add up to more than the smallest
// concurrency any of them states, the quota reports a ContractOversubscribed
// diagnostic with the sum, which makes Ready False; the plan is still
// published. A change of the spec of any quota or contract of the
// downstream starts the reconcile of every quota naming it, so each quota
// with a contract of its own reports it; contracts and the quotas sharing
// them do not.
//
// # Publishing
//
// One ConfigMap per workload (spec.configMapName, or <workload>-backpressure)
// holds one key per quota, plan.KeyFor(quota), whose value is the plan
// document of api/plan. A ConfigMap is the operator's when it carries
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
// # Conditions and events
//
// Ready's reason is the most important finding, in this order; the first
// ten make Ready False:
//
//   - WorkloadNotFound: nothing can be computed; the last published plan,
//     if any, stays published and in status.
//   - InvalidSpec: the spec gives no plan (a value the schema let through).
//   - ConfigMapConflict: the target ConfigMap is not the operator's; nothing
//     is written to it. The operator checks again every conflict recheck
//     interval, because the foreign ConfigMap is outside its cache.
//   - DivisionTooLarge: the record or the document would not fit; nothing
//     new is published.
//   - HPANotFound: the named HPA does not exist; the plan is published from
//     the other facts.
//   - ContractOversubscribed, QuotaTooSmall, Overcommitted,
//     UnacknowledgedDelayTooShort, DeadlineBelowLatency: the plan is
//     published but cannot keep the contract or the deadline.
//     UnacknowledgedDelayTooShort says that spec.handover.unacknowledgedDelay
//     (a contract's, for its callers) is shorter than the quota's deadline.
//   - DemandExceedsQuota: Ready stays True; the demand will be partly shed
//     locally, which is what the quota is for, but worth a look.
//   - PlanPublished: Ready True, nothing to report.
//
// A quota sharing a contract reports ContractNotFound instead when the
// contract is missing or does not admit its namespace, and says so again
// when a step of the contract that began before it went writes Ready over
// it (the contractFoundAgain predicate) or writes the quota's record while
// the quota's reconcile runs (errStale, stepped again after staleRecheck).
//
// HandedOver says where the handover stands: True (HandedOver) when every
// serving pod is told its target and no pod may hold more than it is told;
// False with HandoverInProgress while either is not so (serving pods wait
// for capacity, or pods have not yet let go of capacity they were told to
// give up); False with HandoverStalled when a pod that
// acknowledges plans in this epoch has not acknowledged its smaller share
// within spec.handover.stalledAfter (30s by default, DefaultStalledAfter).
// Its old share stays counted, so its capacity is never reassigned; the
// message names the pods, and status.division.pods lists them with holds.
// A contract has Ready and HandedOver; its Ready is PlanPublished.
//
// PlanApplied says whether the pods enforce the plan published last: True
// with AllPodsApplied when every serving pod's acknowledgement names the
// current epoch and this revision or a newer one, and with NoReadyPods when
// no pod serves; False with PodsNotAcknowledging when a serving pod carries
// no acknowledgement of the epoch at all (acknowledgement off, a mounted
// volume without an API client, or just started: such a pod keeps it False
// for as long as it runs), with PodsPending when serving pods acknowledged
// only earlier revisions, and with PlanNotPublished when the reconcile
// published nothing (Ready says why). It carries observedGeneration, which
// kubectl wait checks. status.podsApplied counts the same pods, "7/8".
//
// Every finding of the plan, with its arithmetic, is also in
// status.diagnostics. Input problems are never retried in a loop: the watches
// on the quota, the workload, the HPA, the pods, the ConfigMaps, and the
// quotas and contracts of the same downstream start the next reconcile when
// the missing object appears.
//
// A quota's status is written once per reconcile, only when it differs
// (equality.Semantic). The quota reconciler's events follow a status write
// and are judged against the status the API server had before it, so a
// reconcile that read a stale
// cache reports nothing twice: a Normal event PlanChanged when the
// division's arithmetic or the ConfigMap changes ("permits 5→4 per pod, 5
// for 4 of them: Ready pods 8→9; 40 usable permits = 4 × 9 + 4"), not on
// every step of a handover; a Warning event HandoverStalled when the
// handover becomes stalled; a Warning event ConfigMapConflict, and one
// DivisionTooLarge; and a Warning event for each of WorkloadNotFound,
// QuotaTooSmall, Overcommitted and ContractOversubscribed when it appears
// among Ready's reason and the diagnostics, once, not again while it stays
// however its numbers move. The contract reconciler records the same
// Warning events on the quotas that share it (not PlanChanged), and nothing
// on the contract.
//
// # Rollout
//
// The runtime library acknowledges a plan by annotating its pod with
// applied.backpressure.dev/<quota>: "<epoch>/<revision>", once its calls in
// flight fit the share that revision gives it (see plan.Ack).
// status.rollout counts the pods that have not finished and whose
// annotation carries the published epoch and revision, and names up to ten
// that do not yet.
package controller
