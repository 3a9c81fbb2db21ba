package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The custom metrics API the harness serves to the HPA controller through
// the API server's aggregation layer.
const (
	// CustomMetricsGroup and CustomMetricsVersion are the API the HPA
	// controller of Kubernetes 1.37 prefers for Pods and Object metrics.
	CustomMetricsGroup   = "custom.metrics.k8s.io"
	CustomMetricsVersion = "v1beta2"
	// DemandMetric is the Pods metric the storm's HPA scales on: the calls
	// to the downstream a pod would have in flight if it admitted every
	// call it was offered (Little's law: offered rate × the latency its
	// admitted calls take), measured from the pod's gate metrics.
	DemandMetric = "backpressure_gate_demand_in_flight"
	// DemandTarget is the average DemandMetric per pod that the storm's HPA
	// (manifests/hpa.yaml) aims at: just above the 52 of 8 pods at the
	// typical latency (1900/s ÷ 8 × 0.22 s), so that 8 pods hold steady
	// within its tolerance.
	DemandTarget = 55
	// ReplicasMetric is an Object metric of a Deployment or StatefulSet whose value is the
	// replica count a scenario with scale steps of its own asks for; its
	// HPA targets an average value of 1, so it decides exactly that count.
	ReplicasMetric = "storm_scenario_replicas"
	// DemandWindow is the window the demand is measured over: a rate over
	// a few seconds, as a Prometheus adapter's rate() would give.
	DemandWindow = 5 * time.Second
	// scrapeInterval is how often every pod's /metrics is read: a few
	// samples per window, and little load on a machine the storm shares.
	scrapeInterval = time.Second
)

// MetricsAPI is the harness's custom metrics API server: an HTTPS server
// that the API server's aggregation layer proxies
// /apis/custom.metrics.k8s.io/v1beta2 to, with the front proxy's client
// certificate. It computes each pod's DemandMetric from what the pod's
// gate exports (scraped every second, over DemandWindow) and serves the ReplicasMetric values
// a scenario sets. It is safe for concurrent use.
type MetricsAPI struct {
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc
	done   chan struct{}
	http   *http.Client

	mu      sync.Mutex
	sources map[string]*podSource // namespace → its workload's pods
	objects map[string]float64    // namespace/kind/name → ReplicasMetric
}

// podSource is one namespace's pods whose gate the API measures.
type podSource struct {
	gate    string
	addrs   func() map[string]string // pod → its /metrics address, now
	samples map[string][]gateSample  // pod → its samples within the window
}

// gateSample is one scrape of a pod's gate.
type gateSample struct {
	at       time.Time
	inFlight float64
	// admitted counts the calls admitted on the pod's own permits,
	// borrowed those run on a permit the reserve lent, rejected those shed.
	admitted, borrowed, rejected float64
}

// StartMetricsAPI serves the API on 127.0.0.1 with the serving certificate
// of pki, accepting only clients with a certificate of the front proxy's
// CA, and starts scraping.
func StartMetricsAPI(pki *AggregationPKI) (*MetricsAPI, error) {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.Serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.FrontProxyCAs,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		return nil, err
	}
	m := &MetricsAPI{
		ln:      ln,
		done:    make(chan struct{}),
		http:    &http.Client{Timeout: 2 * time.Second},
		sources: map[string]*podSource{},
		objects: map[string]float64{},
	}
	mux := http.NewServeMux()
	prefix := "/apis/" + CustomMetricsGroup + "/" + CustomMetricsVersion
	mux.HandleFunc("GET "+prefix, m.serveDiscovery)
	mux.HandleFunc("GET "+prefix+"/namespaces/{ns}/{resource}/{name}/{metric}", m.serveMetric)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.scrapeLoop(ctx)
	return m, nil
}

// Port is the port the API listens on.
func (m *MetricsAPI) Port() int { return m.ln.Addr().(*net.TCPAddr).Port }

// Close stops serving and scraping.
func (m *MetricsAPI) Close() error {
	m.cancel()
	<-m.done
	return m.srv.Close()
}

// MeasurePods makes the API serve DemandMetric for the pods of namespace:
// addrs returns, when called, each running pod's /metrics address; gate
// names the gate whose metrics count. Call the returned function to stop.
func (m *MetricsAPI) MeasurePods(namespace, gate string, addrs func() map[string]string) (stop func()) {
	src := &podSource{gate: gate, addrs: addrs, samples: map[string][]gateSample{}}
	m.mu.Lock()
	m.sources[namespace] = src
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.sources[namespace] == src {
			delete(m.sources, namespace)
		}
		m.mu.Unlock()
	}
}

// SetReplicas sets the ReplicasMetric of a workload of kind (KindDeployment
// or KindStatefulSet).
func (m *MetricsAPI) SetReplicas(namespace, kind, name string, n int32) {
	m.mu.Lock()
	m.objects[namespace+"/"+kind+"/"+name] = float64(n)
	m.mu.Unlock()
}

// scrapeLoop reads every measured pod's gate metrics every scrapeInterval.
func (m *MetricsAPI) scrapeLoop(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(scrapeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		type job struct {
			src       *podSource
			pod, addr string
		}
		var jobs []job
		for _, src := range m.sources {
			addrs := src.addrs()
			for pod := range src.samples {
				if _, ok := addrs[pod]; !ok {
					delete(src.samples, pod) // gone
				}
			}
			for pod, addr := range addrs {
				jobs = append(jobs, job{src, pod, addr})
			}
		}
		m.mu.Unlock()
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() {
				s, err := scrapeGate(ctx, m.http, "http://"+j.addr+"/metrics", j.src.gate)
				if err != nil {
					return // a pod starting or stopping; it has no sample now
				}
				m.mu.Lock()
				defer m.mu.Unlock()
				ss := append(j.src.samples[j.pod], s)
				for len(ss) > 1 && s.at.Sub(ss[0].at) > DemandWindow {
					ss = ss[1:]
				}
				j.src.samples[j.pod] = ss
			})
		}
		wg.Wait()
	}
}

// demand is DemandMetric over the samples of one pod: for each interval
// between two scrapes, the mean calls in flight times offered calls over
// admitted ones (the offered rate times the mean time an admitted call
// stays in flight), and the median of those over the window, so that a
// stall of a second or two of this shared machine, in which a pod admits
// little and so seems to wait long, does not read as demand. The calls run
// on lent permits are offered calls: the gate counts them apart from its
// admitted ones and its in-flight gauge holds only its own permits' calls,
// so offered over admitted scales the own calls in flight up by the
// borrowed ones too, taken to last as long. Left out, a pod that borrows
// much would read as little more than its own share, and its share would
// not follow its demand. ok is false when no interval of the window
// admitted a call on the pod's own permits: a pod without traffic has no
// demand to report, as a rate over no samples has none, and a pod that
// admitted nothing measured no latency (the HPA counts it as missing).
func demand(ss []gateSample) (v float64, ok bool) {
	if len(ss) < 2 || ss[len(ss)-1].at.Sub(ss[0].at) < DemandWindow/2 {
		return 0, false
	}
	var vs []float64
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		admitted := b.admitted - a.admitted
		if admitted <= 0 {
			continue
		}
		offered := admitted + b.borrowed - a.borrowed + b.rejected - a.rejected
		vs = append(vs, (a.inFlight+b.inFlight)/2*offered/admitted)
	}
	if len(vs) == 0 {
		return 0, false
	}
	sort.Float64s(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}

// scrapeGate reads one gate's in-flight, admitted, borrowed and rejected calls from a
// Prometheus text exposition.
func scrapeGate(ctx context.Context, cl *http.Client, url, gate string) (gateSample, error) {
	s := gateSample{at: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	label := fmt.Sprintf("gate=%q", gate)
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || !strings.Contains(","+labels+",", ","+label+",") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return s, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		switch name {
		case "backpressure_gate_in_flight":
			s.inFlight, found = f, found+1
		case "backpressure_gate_admitted_total":
			s.admitted, found = f, found+1
		case "backpressure_gate_rejected_total":
			s.rejected += f
		case "backpressure_gate_borrows_total":
			if strings.Contains(","+labels+",", `,result="borrowed",`) {
				s.borrowed = f
			}
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if found < 2 {
		return s, fmt.Errorf("%s: no in-flight or admitted calls for gate %q", url, gate)
	}
	return s, nil
}

// The custom metrics API's wire types (k8s.io/metrics'
// custom_metrics/v1beta2), written out for the few fields it needs.
type (
	metricValueList struct {
		Kind       string        `json:"kind"`
		APIVersion string        `json:"apiVersion"`
		Metadata   struct{}      `json:"metadata"`
		Items      []metricValue `json:"items"`
	}
	metricValue struct {
		DescribedObject objectRef        `json:"describedObject"`
		Metric          metricIdentifier `json:"metric"`
		Timestamp       time.Time        `json:"timestamp"`
		WindowSeconds   *int64           `json:"windowSeconds,omitempty"`
		Value           string           `json:"value"`
	}
	objectRef struct {
		Kind       string `json:"kind"`
		Namespace  string `json:"namespace"`
		Name       string `json:"name"`
		APIVersion string `json:"apiVersion"`
	}
	metricIdentifier struct {
		Name     string `json:"name"`
		Selector any    `json:"selector"`
	}
	apiResource struct {
		Name       string   `json:"name"`
		Namespaced bool     `json:"namespaced"`
		Kind       string   `json:"kind"`
		Verbs      []string `json:"verbs"`
	}
)

// serveDiscovery lists the API's resources, as the aggregator's discovery
// and the HPA controller's client read them.
func (m *MetricsAPI) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	respondJSON(w, http.StatusOK, map[string]any{
		"kind":         "APIResourceList",
		"apiVersion":   "v1",
		"groupVersion": CustomMetricsGroup + "/" + CustomMetricsVersion,
		"resources": []apiResource{
			{Name: "pods/" + DemandMetric, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}},
			{Name: "deployments.apps/" + ReplicasMetric, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}},
			{Name: "statefulsets.apps/" + ReplicasMetric, Namespaced: true, Kind: "MetricValueList", Verbs: []string{"get"}},
		},
	})
}

// replicasMetricKinds are the resources that have a ReplicasMetric, and
// their kinds.
var replicasMetricKinds = map[string]string{"deployments.apps": KindDeployment, "statefulsets.apps": KindStatefulSet}

// serveMetric answers the HPA controller's two requests: DemandMetric for
// every measured pod of a namespace (pods/*), and ReplicasMetric for one
// Deployment or StatefulSet. Each namespace has one workload, so a Pods request's label
// selector selects all of the namespace's measured pods.
func (m *MetricsAPI) serveMetric(w http.ResponseWriter, r *http.Request) {
	ns, resource, name, metric := r.PathValue("ns"), r.PathValue("resource"), r.PathValue("name"), r.PathValue("metric")
	list := metricValueList{Kind: "MetricValueList", APIVersion: CustomMetricsGroup + "/" + CustomMetricsVersion, Items: []metricValue{}}
	now := time.Now()
	m.mu.Lock()
	switch {
	case resource == "pods" && metric == DemandMetric:
		if src := m.sources[ns]; src != nil {
			window := int64(DemandWindow / time.Second)
			for pod, ss := range src.samples {
				if name != "*" && name != pod {
					continue
				}
				if v, ok := demand(ss); ok {
					list.Items = append(list.Items, metricValue{
						DescribedObject: objectRef{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "/v1"},
						Metric:          metricIdentifier{Name: metric},
						Timestamp:       now, WindowSeconds: &window,
						Value: strconv.FormatInt(int64(math.Round(v*1000)), 10) + "m",
					})
				}
			}
		}
	case replicasMetricKinds[resource] != "" && metric == ReplicasMetric && name != "*":
		kind := replicasMetricKinds[resource]
		if v, ok := m.objects[ns+"/"+kind+"/"+name]; ok {
			list.Items = append(list.Items, metricValue{
				DescribedObject: objectRef{Kind: kind, Namespace: ns, Name: name, APIVersion: "apps/v1"},
				Metric:          metricIdentifier{Name: metric},
				Timestamp:       now,
				Value:           strconv.FormatInt(int64(v), 10),
			})
		}
	}
	m.mu.Unlock()
	if len(list.Items) == 0 {
		respondJSON(w, http.StatusNotFound, map[string]any{
			"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": http.StatusNotFound,
			"message": fmt.Sprintf("no %s for %s %s/%s", metric, resource, ns, name),
		})
		return
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].DescribedObject.Name < list.Items[j].DescribedObject.Name })
	respondJSON(w, http.StatusOK, list)
}

func respondJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
