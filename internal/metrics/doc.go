// Package metrics exports the operator's view of every DownstreamQuota to
// Prometheus: the contract, the divisor, each pod's permits, the rollout of
// the published plan, the Ready condition and the plan's findings.
//
// QuotaCollector lists the quotas from a controller-runtime reader — the
// manager's cache — at scrape time, so it keeps no state of its own and a
// deleted quota's series disappear with it. The metrics, all gauges, all
// labelled namespace and quota:
//
//	backpressure_quota_info{downstream,workload_kind,workload,configmap}  1
//	backpressure_quota_contract_concurrency   spec.contract.concurrency
//	backpressure_quota_safety_ratio           spec.safetyPercent / 100
//	backpressure_quota_divisor                status.replicas.divisor
//	backpressure_quota_permits                status.perPod.permits, per pod
//	backpressure_quota_queue_capacity         status.perPod.queueCapacity, per pod
//	backpressure_quota_rollout_pods           status.rollout.total
//	backpressure_quota_rollout_acknowledged_pods status.rollout.acknowledged
//	backpressure_quota_ready                  1 when Ready is True, else 0
//	backpressure_quota_condition{type,status,reason} 1 for each condition
//	backpressure_quota_diagnostic{reason}     1 for each finding in status.diagnostics
//	backpressure_quota_status_stale           1 while status.observedGeneration is behind metadata.generation
//
// The status-derived series exist only once the operator has written that
// part of the status. backpressure_quota_permits × backpressure_quota_divisor
// is the number of calls all pods may hold in flight together; above
// backpressure_quota_contract_concurrency the quota is Overcommitted.
//
// Besides those, backpressure_quota_collector_up is 1 when the last scrape
// listed the quotas and 0 when listing failed (the error is logged); a failed
// list does not fail the scrape, which also serves controller-runtime's own
// metrics.
//
// With leader election, only the leader exports quota series (see
// WithElected): every replica's cache holds the same quotas, and one series
// per quota lets queries join on namespace and quota without aggregating
// replicas first.
package metrics
