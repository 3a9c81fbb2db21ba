package metrics

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// defaultListTimeout bounds the list a scrape makes. A cache-backed reader
// answers from memory; the bound matters only while an informer is still
// syncing, and it keeps a scrape from hanging then.
const defaultListTimeout = 5 * time.Second

// quotaLabels are the labels of every per-quota series.
var quotaLabels = []string{"namespace", "quota"}

var (
	descInfo = prometheus.NewDesc("backpressure_quota_info",
		"A DownstreamQuota, 1 for each, with the downstream it limits, the workload it is divided over and the ConfigMap it publishes to.",
		append(quotaLabels, "downstream", "workload_kind", "workload", "configmap"), nil)
	descConcurrency = prometheus.NewDesc("backpressure_quota_contract_concurrency",
		"The downstream's global in-flight limit (spec.contract.concurrency).", quotaLabels, nil)
	descSafety = prometheus.NewDesc("backpressure_quota_safety_ratio",
		"The part of the contract handed out to pods (spec.safetyPercent / 100).", quotaLabels, nil)
	descDivisor = prometheus.NewDesc("backpressure_quota_divisor",
		"The number of pods the usable permits are divided over: the Ready pods that are not terminating (status.replicas.divisor).",
		quotaLabels, nil)
	descPermits = prometheus.NewDesc("backpressure_quota_permits",
		"The base share of each Ready pod, in permits (status.perPod.permits); status.division.extra pods hold one more.", quotaLabels, nil)
	descUsable = prometheus.NewDesc("backpressure_quota_permits_usable",
		"The permits the quota hands out once the handover is done (status.division.usable).", quotaLabels, nil)
	descHandedOut = prometheus.NewDesc("backpressure_quota_permits_handed_out",
		"The permits the published plan gives the pods (status.division.handedOut).", quotaLabels, nil)
	descHeld = prometheus.NewDesc("backpressure_quota_permits_held",
		"Σ over pods of the larger of what each is told and what it may still hold (status.division.held).", quotaLabels, nil)
	descQueue = prometheus.NewDesc("backpressure_quota_queue_capacity",
		"Each pod's waiting room size in the published plan (status.perPod.queueCapacity).", quotaLabels, nil)
	descRolloutPods = prometheus.NewDesc("backpressure_quota_rollout_pods",
		"The workload's existing pods (status.rollout.total).", quotaLabels, nil)
	descRolloutAcked = prometheus.NewDesc("backpressure_quota_rollout_acknowledged_pods",
		"The workload's pods whose applied.backpressure.dev annotation acknowledges the published revision (status.rollout.acknowledged).",
		quotaLabels, nil)
	descReady = prometheus.NewDesc("backpressure_quota_ready",
		"1 when the quota's Ready condition is True, else 0.", quotaLabels, nil)
	descCondition = prometheus.NewDesc("backpressure_quota_condition",
		"The quota's status conditions, 1 for each, with its status and reason.",
		append(quotaLabels, "type", "status", "reason"), nil)
	descDiagnostic = prometheus.NewDesc("backpressure_quota_diagnostic",
		"The findings of the quota's plan (status.diagnostics), 1 for each reason.",
		append(quotaLabels, "reason"), nil)
	descStale = prometheus.NewDesc("backpressure_quota_status_stale",
		"1 while the status describes an older spec than the current one (status.observedGeneration < metadata.generation), else 0.",
		quotaLabels, nil)
	descUp = prometheus.NewDesc("backpressure_quota_collector_up",
		"1 when the last scrape listed the DownstreamQuotas, 0 when listing failed.", nil, nil)
)

// QuotaCollector is a prometheus.Collector exporting the backpressure_quota_*
// metrics of every DownstreamQuota a reader lists; see the package
// documentation. Build it with NewQuotaCollector. It is safe for concurrent
// use.
type QuotaCollector struct {
	reader  client.Reader
	elected <-chan struct{}
	timeout time.Duration
	log     logr.Logger
}

var _ prometheus.Collector = (*QuotaCollector)(nil)

// Option configures a QuotaCollector.
type Option func(*QuotaCollector)

// WithElected makes the collector export nothing until elected is closed,
// as manager.Manager's Elected channel is once the replica leads (or at
// start, without leader election). By default it exports at once.
func WithElected(elected <-chan struct{}) Option {
	return func(c *QuotaCollector) { c.elected = elected }
}

// WithLogger sets the logger that reports failed lists; the default
// discards them.
func WithLogger(log logr.Logger) Option {
	return func(c *QuotaCollector) { c.log = log }
}

// withListTimeout bounds each scrape's list; the default is
// defaultListTimeout.
func withListTimeout(d time.Duration) Option {
	return func(c *QuotaCollector) { c.timeout = d }
}

// NewQuotaCollector returns a collector that lists DownstreamQuotas from
// reader, in every namespace, at each scrape. The reader's scheme must know
// package v1alpha1.
func NewQuotaCollector(reader client.Reader, opts ...Option) *QuotaCollector {
	c := &QuotaCollector{reader: reader, timeout: defaultListTimeout, log: logr.Discard()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Describe sends the descriptors of every metric the collector exports.
func (c *QuotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descInfo, descConcurrency, descSafety, descDivisor, descPermits, descUsable, descHandedOut, descHeld, descQueue,
		descRolloutPods, descRolloutAcked, descReady, descCondition, descDiagnostic, descStale, descUp,
	} {
		ch <- d
	}
}

// Collect lists the quotas and sends their metrics. A failed list is logged
// and reported by backpressure_quota_collector_up = 0 alone.
func (c *QuotaCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var list v1alpha1.DownstreamQuotaList
	if err := c.reader.List(ctx, &list); err != nil {
		c.log.Error(err, "Failed to list DownstreamQuotas for metrics")
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	for i := range list.Items {
		collectQuota(ch, &list.Items[i])
	}
}

// leading reports whether the collector exports now.
func (c *QuotaCollector) leading() bool {
	if c.elected == nil {
		return true
	}
	select {
	case <-c.elected:
		return true
	default:
		return false
	}
}

// collectQuota sends the series of one quota.
func collectQuota(ch chan<- prometheus.Metric, q *v1alpha1.DownstreamQuota) {
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{q.Namespace, q.Name}, extra...)...)
	}
	spec, st := &q.Spec, &q.Status

	configMap := spec.ConfigMapName
	if st.ConfigMap != nil {
		configMap = st.ConfigMap.Name
	} else if configMap == "" {
		configMap = spec.WorkloadRef.Name + v1alpha1.ConfigMapSuffix
	}
	gauge(descInfo, 1, spec.Downstream, spec.WorkloadRef.Kind, spec.WorkloadRef.Name, configMap)
	if spec.Contract != nil {
		gauge(descConcurrency, float64(spec.Contract.Concurrency))
	}
	if spec.SafetyPercent > 0 {
		gauge(descSafety, float64(spec.SafetyPercent)/100)
	}
	if st.Replicas != nil {
		gauge(descDivisor, float64(st.Replicas.Divisor))
	}
	if st.PerPod != nil {
		gauge(descPermits, float64(st.PerPod.Permits))
		gauge(descQueue, float64(st.PerPod.QueueCapacity))
	}
	if d := st.Division; d != nil {
		gauge(descUsable, float64(d.Usable))
		gauge(descHandedOut, float64(d.HandedOut))
		gauge(descHeld, float64(d.Held))
	}
	if st.Rollout != nil {
		gauge(descRolloutPods, float64(st.Rollout.Total))
		gauge(descRolloutAcked, float64(st.Rollout.Acknowledged))
	}

	ready := 0.0
	for _, cond := range st.Conditions {
		gauge(descCondition, 1, cond.Type, string(cond.Status), cond.Reason)
		if cond.Type == v1alpha1.ConditionReady && cond.Status == metav1.ConditionTrue {
			ready = 1
		}
	}
	gauge(descReady, ready)

	seen := make(map[string]bool, len(st.Diagnostics))
	for _, d := range st.Diagnostics {
		// A reason may appear twice; one series per reason keeps the
		// metric valid.
		if !seen[d.Reason] {
			seen[d.Reason] = true
			gauge(descDiagnostic, 1, d.Reason)
		}
	}

	stale := 0.0
	if st.ObservedGeneration < q.Generation {
		stale = 1
	}
	gauge(descStale, stale)
}
