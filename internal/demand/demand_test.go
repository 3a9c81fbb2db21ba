package demand_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/internal/demand"
)

// metricsAPI is a custom metrics API on 127.0.0.1 as an adapter behind the
// aggregation layer serves it: the discovery documents, and one Pods
// metric for the pods of one namespace.
type metricsAPI struct {
	srv *httptest.Server

	mu sync.Mutex
	// registered is set while /apis lists custom.metrics.k8s.io.
	registered bool
	// metric is the metric served; values maps a pod to its value as a
	// Quantity string.
	metric string
	values map[string]string
	// reads counts the metric requests, selectors the label selectors they
	// asked for.
	reads     int
	selectors []string
	// bodies is the size of each metric response.
	bodies []int
}

func startMetricsAPI(t *testing.T) *metricsAPI {
	t.Helper()
	a := &metricsAPI{registered: true, metric: demand.DefaultMetric, values: map[string]string{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *metricsAPI) config() *rest.Config {
	return &rest.Config{Host: a.srv.URL, Timeout: 5 * time.Second}
}

func (a *metricsAPI) set(f func(a *metricsAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

func writeJSON(w http.ResponseWriter, v any) int {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	return len(b)
}

func (a *metricsAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	const prefix = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"
	switch {
	case r.URL.Path == "/api":
		writeJSON(w, map[string]any{"kind": "APIVersions", "versions": []string{"v1"}})
	case r.URL.Path == "/apis":
		groups := []any{}
		if a.registered {
			v := map[string]string{"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"}
			groups = append(groups, map[string]any{"name": "custom.metrics.k8s.io", "versions": []any{v}, "preferredVersion": v})
		}
		writeJSON(w, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
	case a.registered && strings.HasPrefix(r.URL.Path, prefix):
		// namespaces/<ns>/pods/*/<metric>
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, prefix), "/")
		if len(parts) != 4 || parts[1] != "pods" || parts[2] != "*" {
			http.NotFound(w, r)
			return
		}
		a.reads++
		a.selectors = append(a.selectors, r.URL.Query().Get("labelSelector"))
		if parts[3] != a.metric {
			w.WriteHeader(http.StatusNotFound)
			writeJSON(w, map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
				"message": fmt.Sprintf("the server could not find the metric %s for pods", parts[3])})
			return
		}
		items := []any{}
		for pod, v := range a.values {
			items = append(items, map[string]any{
				"describedObject": map[string]string{"kind": "Pod", "namespace": parts[0], "name": pod, "apiVersion": "/v1"},
				"metric":          map[string]any{"name": a.metric},
				"timestamp":       "2026-01-02T03:04:05Z",
				"windowSeconds":   60,
				"value":           v,
			})
		}
		a.bodies = append(a.bodies, writeJSON(w, map[string]any{"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2",
			"metadata": map[string]any{}, "items": items}))
	default:
		http.NotFound(w, r)
	}
}

func TestReaderReadsEveryPodInOneRequest(t *testing.T) {
	api := startMetricsAPI(t)
	api.set(func(a *metricsAPI) {
		a.values = map[string]string{"api-a": "20", "api-b": "9500m", "api-c": "2001m", "api-d": "0"}
	})
	r, err := demand.NewReader(api.config())
	if err != nil {
		t.Fatal(err)
	}
	sel := labels.SelectorFromSet(labels.Set{"app": "api"})
	got, err := r.Read(context.Background(), "shop", sel, demand.DefaultMetric)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"api-a": 20, "api-b": 10, "api-c": 3, "api-d": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
	api.set(func(a *metricsAPI) {
		if a.reads != 1 || len(a.selectors) != 1 || a.selectors[0] != "app=api" {
			t.Errorf("metric requests = %d with selectors %q, want 1 with app=api", a.reads, a.selectors)
		}
	})
}

func TestReaderLeavesOutPodsWithoutAValue(t *testing.T) {
	api := startMetricsAPI(t)
	api.set(func(a *metricsAPI) { a.values = map[string]string{"api-a": "4"} })
	r, err := demand.NewReader(api.config())
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(context.Background(), "shop", labels.Everything(), demand.DefaultMetric)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"api-a": 4}, got); diff != "" {
		t.Errorf("Read (-want +got):\n%s", diff)
	}
}

func TestReaderUnavailable(t *testing.T) {
	api := startMetricsAPI(t)
	api.set(func(a *metricsAPI) { a.values = map[string]string{"api-a": "4"} })
	r, err := demand.NewReader(api.config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(name string, metric, wantIn string) {
		t.Helper()
		got, err := r.Read(ctx, "shop", labels.Everything(), metric)
		if !errors.Is(err, demand.ErrUnavailable) || got != nil {
			t.Fatalf("%s: Read = %v, %v; want nil and an error wrapping ErrUnavailable", name, got, err)
		}
		if !strings.Contains(err.Error(), wantIn) {
			t.Errorf("%s: error %q does not say %q", name, err, wantIn)
		}
	}
	check("metric not served", "requests_per_second", `"requests_per_second"`)

	api.set(func(a *metricsAPI) { a.values = map[string]string{} })
	check("no pod has a value", demand.DefaultMetric, "no value")

	// The API goes away: the first read fails on the version discovered
	// before, the next one finds none.
	api.set(func(a *metricsAPI) { a.registered = false })
	check("API gone", demand.DefaultMetric, "could not find the requested resource")
	check("API not registered", demand.DefaultMetric, "no custom metrics API (custom.metrics.k8s.io) registered")

	// Registered again (an adapter installed later): found without a new
	// Reader, since a failed read forgets the discovered version.
	api.set(func(a *metricsAPI) { a.registered, a.values = true, map[string]string{"api-a": "7"} })
	got, err := r.Read(ctx, "shop", labels.Everything(), demand.DefaultMetric)
	if err != nil || got["api-a"] != 7 {
		t.Fatalf("Read after the API is registered again = %v, %v; want api-a 7", got, err)
	}

	// Unreachable.
	api.srv.Close()
	check("API server unreachable", demand.DefaultMetric, "Pods metric")
}

// TestReaderResponseSize measures what one pod adds to the response of a
// read, the operator's cost per pod and interval: the figure
// docs/concepts.md multiplies by 20,000 pods.
func TestReaderResponseSize(t *testing.T) {
	api := startMetricsAPI(t)
	r, err := demand.NewReader(api.config())
	if err != nil {
		t.Fatal(err)
	}
	size := func(pods int) int {
		api.set(func(a *metricsAPI) {
			a.values = map[string]string{}
			for i := range pods {
				a.values[fmt.Sprintf("search-gateway-7d9f8c6b5-%05d", i)] = "12500m"
			}
		})
		if _, err := r.Read(context.Background(), "shop", labels.Everything(), demand.DefaultMetric); err != nil {
			t.Fatal(err)
		}
		var n int
		api.set(func(a *metricsAPI) { n = a.bodies[len(a.bodies)-1] })
		return n
	}
	one, many := size(1), size(1001)
	perPod := float64(many-one) / 1000
	t.Logf("response: %d bytes for 1 pod, %d for 1001: %.0f bytes per pod; 20,000 pods: %.1f MB per interval", one, many, perPod, perPod*20000/1e6)
	if perPod < 100 || perPod > 1000 {
		t.Errorf("%.0f bytes per pod; a MetricValue names its pod, metric, time, window and value: expected a few hundred", perPod)
	}
}

func TestPermits(t *testing.T) {
	for milli, want := range map[int64]int64{-5: 0, 0: 0, 1: 1, 999: 1, 1000: 1, 1001: 2, 20000: 20} {
		if got := demand.Permits(milli); got != want {
			t.Errorf("Permits(%d) = %d, want %d", milli, got, want)
		}
	}
}
