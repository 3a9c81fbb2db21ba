package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestDemand(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		ss   []gateSample
		want float64
		ok   bool
	}{
		{"no samples", nil, 0, false},
		{"one sample", []gateSample{{at: at(0), inFlight: 5}}, 0, false},
		{"window too short", []gateSample{{at: at(0), inFlight: 5}, {at: at(2000), inFlight: 5, admitted: 10}}, 0, false},
		{"no calls", []gateSample{{at: at(0), inFlight: 0}, {at: at(3000), inFlight: 0}}, 0, false},
		// 8 pods at 220ms: 5 permits full, 22.7 admitted/s of 237.5 offered.
		{"saturated at the typical latency", []gateSample{
			{at: at(0), inFlight: 5, admitted: 1000, rejected: 5000},
			{at: at(1500), inFlight: 5, admitted: 1000 + 34.1, rejected: 5000 + 322.15},
			{at: at(3000), inFlight: 5, admitted: 1000 + 68.2, rejected: 5000 + 644.3},
		}, 5 * (34.1 + 322.15) / 34.1, true},
		{"every call admitted, in flight averaged over each interval", []gateSample{
			{at: at(0), inFlight: 2, admitted: 0},
			{at: at(3000), inFlight: 4, admitted: 30},
		}, 3, true},
		// A one-second stall: the pod admits 2 calls instead of 20 and
		// seems to keep them ten times as long; the median ignores it.
		{"a stall does not read as demand", []gateSample{
			{at: at(0), inFlight: 5, admitted: 0, rejected: 0},
			{at: at(1000), inFlight: 5, admitted: 20, rejected: 200},
			{at: at(2000), inFlight: 5, admitted: 22, rejected: 420},
			{at: at(3000), inFlight: 5, admitted: 42, rejected: 620},
		}, 5 * 220.0 / 20, true},
		{"intervals without an admission are left out", []gateSample{
			{at: at(0), inFlight: 2},
			{at: at(1000), inFlight: 2, rejected: 100},
			{at: at(2000), inFlight: 2, admitted: 1, rejected: 200},
			{at: at(3000), inFlight: 2, admitted: 1, rejected: 300},
		}, 2 * 101.0, true},
		// 3 own permits full and 2 calls on lent ones; 30 calls admitted
		// on the own permits, 20 run on lent ones and 10 shed:
		// (3 + 2) × (30 + 20 + 10) / (30 + 20).
		{"calls on lent permits are offered and running calls", []gateSample{
			{at: at(0), inFlight: 3, borrowedInFlight: 2, admitted: 100, borrowed: 50, rejected: 10},
			{at: at(3000), inFlight: 3, borrowedInFlight: 2, admitted: 130, borrowed: 70, rejected: 20},
		}, 5 * 60.0 / 50, true},
		// Loans going back early: of the 4 calls on own permits, 2 began
		// on a loan and are not among the 20 admitted; 20 more ran on
		// loans, 1 of which is running on one. Own in flight over own
		// admitted alone would read 4 × 50 / 20 = 10.
		{"calls moved off their loans are not read twice", []gateSample{
			{at: at(0), inFlight: 4, borrowedInFlight: 1, admitted: 0, borrowed: 0, rejected: 0},
			{at: at(4000), inFlight: 4, borrowedInFlight: 1, admitted: 20, borrowed: 20, rejected: 10},
		}, 5 * 50.0 / 40, true},
		{"calls run only on lent permits", []gateSample{
			{at: at(0), inFlight: 0, borrowedInFlight: 2},
			{at: at(3000), inFlight: 0, borrowedInFlight: 2, borrowed: 30},
		}, 2, true},
		// 2 of the 5 own permits in use are lent out to other pods' calls:
		// another pod's demand, not this one's. 3 × 40 / 40.
		{"permits lent out are not the pod's demand", []gateSample{
			{at: at(0), inFlight: 5, lentOutInFlight: 2, admitted: 0},
			{at: at(3000), inFlight: 5, lentOutInFlight: 2, admitted: 40},
		}, 3, true},
		{"nothing admitted: no latency measured", []gateSample{
			{at: at(0), inFlight: 2, rejected: 0},
			{at: at(3000), inFlight: 2, rejected: 99},
		}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := demand(tc.ss, DemandWindow)
			if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("demand() = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestMetricsAPI serves the API over TLS as the aggregator reaches it:
// only a client with the front proxy's certificate gets in; the pods'
// demand comes from their scraped gate metrics, and the replicas metric
// from what the scenario set.
func TestMetricsAPI(t *testing.T) {
	var admitted atomic.Int64
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Each scrape: 10 more calls admitted, 20 borrowed and 70
		// rejected, 8 of the pod's permits in use, 3 of them lent out to
		// other pods' calls, and 10 calls on lent ones; the borrows the
		// reserve refused are not calls offered a second time.
		n := admitted.Add(10)
		_, _ = fmt.Fprintf(w, "# HELP backpressure_gate_in_flight x\nbackpressure_gate_in_flight{gate=\"g\"} 8\nbackpressure_gate_in_flight{gate=\"other\"} 40\n"+
			"backpressure_gate_lent_out_in_flight{gate=\"g\"} 3\nbackpressure_gate_lent_out_in_flight{gate=\"other\"} 30\n"+
			"backpressure_gate_admitted_total{gate=\"g\"} %d\nbackpressure_gate_rejected_total{gate=\"g\",reason=\"queue_full\"} %d\n"+
			"backpressure_gate_rejected_total{gate=\"g\",reason=\"wait_timeout\"} %d\n"+
			"backpressure_gate_borrows_total{gate=\"g\",result=\"borrowed\"} %d\nbackpressure_gate_borrows_total{gate=\"g\",result=\"not_lent\"} %d\n"+
			"backpressure_gate_borrowed_in_flight{gate=\"g\"} 10\nbackpressure_gate_borrowed_in_flight{gate=\"other\"} 7\n", n, 3*n, 4*n, 2*n, 9*n)
	}))
	defer pod.Close()
	pki, err := NewAggregationPKI(t.TempDir(), MetricsService, MetricsServiceNamespace)
	if err != nil {
		t.Fatal(err)
	}
	m, err := StartMetricsAPI(pki)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	stop := m.MeasurePods("ns", "g", DemandWindow, func() map[string]string { return map[string]string{"pod-a": pod.Listener.Addr().String()} })
	defer stop()
	m.SetReplicas("ns", KindDeployment, "web", 7)
	m.SetReplicas("ns", KindStatefulSet, "db", 3)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.ServingCABundle)
	clientCert, err := tls.LoadX509KeyPair(pki.ProxyClientCertFile, pki.ProxyClientKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://localhost:%d/apis/custom.metrics.k8s.io/v1beta2", m.Port())
	get := func(cl *http.Client, path string) (int, metricValueList, error) {
		var l metricValueList
		resp, err := cl.Get(base + path)
		if err != nil {
			return 0, l, err
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.StatusCode, l, json.NewDecoder(resp.Body).Decode(&l)
	}
	anonymous := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: MetricsService + "." + MetricsServiceNamespace + ".svc"}}}
	if _, _, err := get(anonymous, ""); err == nil {
		t.Error("a client without the front proxy's certificate was served")
	}
	proxy := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{clientCert}, ServerName: MetricsService + "." + MetricsServiceNamespace + ".svc"}}}

	if code, l, err := get(proxy, "/namespaces/ns/deployments.apps/web/"+ReplicasMetric); err != nil || code != http.StatusOK ||
		len(l.Items) != 1 || l.Items[0].Value != "7" || l.Items[0].DescribedObject.Name != "web" {
		t.Errorf("replicas metric: %d %+v %v", code, l, err)
	}
	if code, _, err := get(proxy, "/namespaces/other/deployments.apps/web/"+ReplicasMetric); err != nil || code != http.StatusNotFound {
		t.Errorf("replicas metric of an unknown deployment: %d %v, want 404", code, err)
	}
	if code, l, err := get(proxy, "/namespaces/ns/statefulsets.apps/db/"+ReplicasMetric); err != nil || code != http.StatusOK ||
		len(l.Items) != 1 || l.Items[0].Value != "3" || l.Items[0].DescribedObject.Kind != KindStatefulSet {
		t.Errorf("replicas metric of a statefulset: %d %+v %v", code, l, err)
	}
	if code, _, err := get(proxy, "/namespaces/ns/statefulsets.apps/web/"+ReplicasMetric); err != nil || code != http.StatusNotFound {
		t.Errorf("replicas metric of a statefulset named as the deployment: %d %v, want 404", code, err)
	}

	// The demand: (8 − 3 + 10) in flight × (10 + 20 + 70) offered / (10 +
	// 20) run = 50, once the window holds half of DemandWindow.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, l, err := get(proxy, "/namespaces/ns/pods/*/"+DemandMetric)
		if err == nil && code == http.StatusOK {
			if len(l.Items) != 1 || l.Items[0].DescribedObject.Name != "pod-a" || l.Items[0].Value != "50000m" {
				t.Fatalf("demand: %+v", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no demand within 10s: %d %v", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
