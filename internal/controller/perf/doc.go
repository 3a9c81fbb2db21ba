// Package perf measures the DownstreamQuota controller against a real API
// server (envtest): how fast a change of a workload's replicas reaches its
// ConfigMap, and how a cold start over many quotas behaves (time until every
// quota is Ready, API writes, peak memory, and the writes of a restart that
// finds everything current, which must be none).
//
// The measurements report numbers rather than assert timings, and run only
// when BACKPRESSURE_PERF=1:
//
//	BACKPRESSURE_PERF=1 KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" \
//	  go test -run . -v -timeout 20m ./internal/controller/perf
//
// BACKPRESSURE_PERF_CHANGES (default 200), BACKPRESSURE_PERF_WORKLOADS
// (default 200) and BACKPRESSURE_PERF_QUOTAS_PER_WORKLOAD (default 10) size
// them.
package perf
