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
	window  time.Duration            // the demand's window (MeasurePods)
	addrs   func() map[string]string // pod → its /metrics address, now
	samples map[string][]gateSample  // pod → its samples within the window
}

// gateSample is one scrape of a pod's gate.
type gateSample struct {
	at time.Time
	// inFlight counts the pod's own permits in use: its calls on them (a
	// call whose loan went back early among them) and the permits it lent
	// out to other pods' calls, which lentOutInFlight counts;
	// borrowedInFlight counts its calls on lent permits.
	inFlight, lentOutInFlight, borrowedInFlight float64
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

// MeasurePods makes the API serve DemandMetric for the pods of namespace,
// measured over window (DemandWindow for the HPA's quick reaction; the
// operator's read interval for shares that follow demand, so that each of
// its readings covers every call since the one before): addrs returns,
// when called, each running pod's /metrics address; gate names the gate
// whose metrics count. Call the returned function to stop.
func (m *MetricsAPI) MeasurePods(namespace, gate string, window time.Duration, addrs func() map[string]string) (stop func()) {
	src := &podSource{gate: gate, window: window, addrs: addrs, samples: map[string][]gateSample{}}
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
				for len(ss) > 1 && s.at.Sub(ss[0].at) > j.src.window {
					ss = ss[1:]
				}
				j.src.samples[j.pod] = ss
			})
		}
		wg.Wait()
	}
}

// demand is DemandMetric over the samples of one pod: for each interval
// between two scrapes, the mean calls running times offered calls over
// the calls that ran (the offered rate times the mean time a call that ran
// stays in flight, by Little's law), and the median of those over the
// window, so that a stall of a second or two of this shared machine, in
// which a pod admits little and so seems to wait long, does not read as
// demand. The calls that ran are those admitted on the pod's own permits
// and those run on lent ones; the calls running are the gate's in flight
// and its borrowed in flight, less the permits it lent out to other pods'
// calls (another pod's demand). Counting both matters once loans go back
// early: a borrowed call then moves to an own permit, where it is in the
// in-flight gauge but not among the admitted calls, and own in flight over
// own admitted would read every borrowing pod's latency, and so its
// demand, too high, pressing the busiest pod's share down towards the
// others'. ok is false when no call ran in any interval of the window: a
// pod without traffic has no demand to report, as a rate over no samples
// has none, and a pod that ran nothing measured no latency (the HPA counts
// it as missing).
func demand(ss []gateSample, window time.Duration) (v float64, ok bool) {
	if len(ss) < 2 || ss[len(ss)-1].at.Sub(ss[0].at) < window/2 {
		return 0, false
	}
	var vs []float64
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		ran := b.admitted - a.admitted + b.borrowed - a.borrowed
		if ran <= 0 {
			continue
		}
		offered := ran + b.rejected - a.rejected
		running := (a.inFlight - a.lentOutInFlight + a.borrowedInFlight + b.inFlight - b.lentOutInFlight + b.borrowedInFlight) / 2
		vs = append(vs, running*offered/ran)
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
		case "backpressure_gate_borrowed_in_flight":
			s.borrowedInFlight = f
		case "backpressure_gate_lent_out_in_flight":
			s.lentOutInFlight = f
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
			window := int64(src.window / time.Second)
			for pod, ss := range src.samples {
				if name != "*" && name != pod {
					continue
				}
				if v, ok := demand(ss, src.window); ok {
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
