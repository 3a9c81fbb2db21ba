// Package perf measures the DownstreamQuota controller against a real API
// server (envtest): how fast a change of a workload's Ready pods (the
// divisor) reaches its ConfigMap; how a cold start over many quotas behaves
// (time until every quota is Ready, API writes, peak memory, and the writes
// of a restart that finds everything current, which must be none); what
// pod churn costs the operator (CPU and reconciles per pod event, with the
// Ready-pods-to-ConfigMap p99 of another workload asserted under 100 ms
// during the churn); and the Go heap a cached pod costs.
//
// The measurements run only when BACKPRESSURE_PERF=1:
//
//	BACKPRESSURE_PERF=1 KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" \
//	  go test -run . -v -timeout 60m ./test/perf
//
// BACKPRESSURE_PERF_CHANGES (default 200), BACKPRESSURE_PERF_WORKLOADS
// (default 200) and BACKPRESSURE_PERF_QUOTAS_PER_WORKLOAD (default 10) size
// the latency and cold start measurements; BACKPRESSURE_PERF_CHURN_PODS
// (default 20000), BACKPRESSURE_PERF_CHURN_WORKLOADS (2000),
// BACKPRESSURE_PERF_CHURN_RATE (200 events a second) and
// BACKPRESSURE_PERF_CHURN_SECONDS (60) the churn; and
// BACKPRESSURE_PERF_MEMORY_PODS (5000) the pod cache measurement.
package perf
