// Package demand reads each pod's measured demand from the custom metrics
// API (custom.metrics.k8s.io), the API the HorizontalPodAutoscaler reads:
// one request per workload returns a Pods metric for every pod its label
// selector matches.
//
// The demand is what package division's Follow divides a caller's part by.
// Reading it from the custom metrics API costs no write and nothing in
// etcd: the API server proxies the request to the adapter that serves it
// (prometheus-adapter in most clusters), and the adapter answers from its
// own store.
package demand

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/metrics/pkg/client/custom_metrics"
)

// DefaultMetric is the Pods metric read when a quota names none: each
// pod's calls in flight, waiting and shed, smoothed, in permits, as the
// library's gate measures it (the metric the storm's HPA scales on).
const DefaultMetric = "backpressure_gate_demand_in_flight"

// ErrUnavailable is wrapped by every error of Read: no demand could be read
// at all (the custom metrics API is not registered or not reachable, it
// does not serve the metric, or it has a value for none of the pods).
// Whoever divides by demand then divides equally.
var ErrUnavailable = errors.New("demand unavailable")

// Source reads the demand of the pods of namespace that selector matches.
type Source interface {
	// Read returns each pod's demand by name, in whole permits, from the
	// Pods metric named metric. A pod the metric has no value for is not
	// in the map. Read makes one request whatever the number of pods.
	Read(ctx context.Context, namespace string, selector labels.Selector, metric string) (map[string]int64, error)
}

// Reader is a Source backed by the custom metrics API through
// k8s.io/metrics's client, the one the HPA controller uses: it finds the
// API's preferred version by discovery, once, and again after any failed
// read (so that an adapter installed or upgraded later is found). It is
// safe for concurrent use.
type Reader struct {
	client custom_metrics.CustomMetricsClient
	apis   custom_metrics.AvailableAPIsGetter
	// mu serialises reads: the client's version cache is shared.
	mu sync.Mutex
}

// NewReader returns a Reader talking to the API server of cfg.
func NewReader(cfg *rest.Config) (*Reader, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("demand: discovery client: %w", err)
	}
	apis := custom_metrics.NewAvailableAPIsGetter(dc)
	return &Reader{client: custom_metrics.NewForConfig(cfg, podMapper(), apis), apis: apis}, nil
}

// podMapper maps the one kind the Reader asks about, Pod, to its resource:
// a static mapping costs no discovery of every API group.
func podMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{corev1.SchemeGroupVersion})
	m.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	return m
}

// Read implements Source.
func (r *Reader) Read(ctx context.Context, namespace string, selector labels.Selector, metric string) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	list, err := r.client.NamespacedMetrics(namespace).GetForObjects(schema.GroupKind{Kind: "Pod"}, selector, metric, labels.Everything())
	if err != nil {
		r.apis.Invalidate()
		return nil, fmt.Errorf("%w: custom metrics API, Pods metric %q in namespace %s: %w", ErrUnavailable, metric, namespace, err)
	}
	out := make(map[string]int64, len(list.Items))
	for _, v := range list.Items {
		if v.DescribedObject.Kind != "" && v.DescribedObject.Kind != "Pod" {
			continue
		}
		out[v.DescribedObject.Name] = Permits(v.Value.MilliValue())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: custom metrics API has no value of Pods metric %q for the pods %q of namespace %s", ErrUnavailable, metric, selector, namespace)
	}
	return out, nil
}

// Permits converts a demand in thousandths of a permit to whole permits,
// rounding up: a pod with 2.3 calls in flight on average needs a third
// permit part of the time, and a division capped below what a pod uses
// sheds its calls while the surplus is split evenly anyway. A negative
// value (an adapter's error) counts as 0.
func Permits(milli int64) int64 {
	if milli <= 0 {
		return 0
	}
	if milli > math.MaxInt64-999 {
		return math.MaxInt64 / 1000
	}
	return (milli + 999) / 1000
}
