package manifests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	quotametrics "github.com/backpressure-dev/backpressure-operator/internal/metrics"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
)

// recordingRegisterer registers with a real registry and remembers every
// collector, so that the names of metrics that have no series yet (a
// counter vector without children) can still be read from their
// descriptors.
type recordingRegisterer struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// fqName reads a descriptor's metric name from its String form, the only
// place client_golang exposes it.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// registeredMetrics returns the names of every metric the library (gates,
// dispatchers, retry budgets, config reloads, the HTTP transport)
// and the manager (quota metrics) register, from their collectors'
// descriptors.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{reg: prometheus.NewPedanticRegistry()}
	// A Runtime registers the metrics of its gates, retry budgets,
	// dispatchers and config source once it has read a valid plan.
	dir := t.TempDir()
	doc := plan.Document{Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "e1", Revision: 1, Permits: 5, QueueCapacity: 9,
		MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1, LatencySeconds: 0.22, DeadlineSeconds: 2, Workers: 5}
	doc.Hash = plan.Hash(doc)
	data, err := plan.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, plan.KeyFor(doc.Gate)), data, 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		Dispatchers: []string{doc.Gate}, Registerer: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	if _, err := httpmw.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if err := rec.Register(quotametrics.NewQuotaCollector(fake.NewClientBuilder().WithScheme(scheme(t)).Build())); err != nil {
		t.Fatal(err)
	}

	names := map[string]bool{}
	for _, c := range rec.collectors {
		descs := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			names[m[1]] = true
		}
	}
	if len(names) < 20 {
		t.Fatalf("read only %d metric names from the collectors: %v", len(names), names)
	}
	return names
}

// metricName matches the names of the project's metrics in PromQL.
var metricName = regexp.MustCompile(`\bbackpressure_[a-z0-9_]+`)

// unknownMetrics returns the backpressure_* names expr queries that no
// collector registers; a histogram's _bucket, _sum and _count series count
// as its own.
func unknownMetrics(expr string, registered map[string]bool) []string {
	var unknown []string
	for _, name := range metricName.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && registered[b] {
				base = b
			}
		}
		if !registered[base] {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// The dashboard parses, lays its panels out on Grafana's 24-column grid
// without overlaps, queries through its data source variable, and queries
// only metrics that the library or the manager registers — among them
// every metric its panels promise.
func TestDashboard(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(readRepoFile(t, "config/prometheus/dashboard.json"), &d); err != nil {
		t.Fatalf("config/prometheus/dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q and title %q must be set", d.UID, d.Title)
	}
	registered := registeredMetrics(t)

	vars := map[string]bool{}
	var exprs []string
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		exprs = append(exprs, v.Definition)
	}
	ids := map[int]bool{}
	type rect struct{ x0, y0, x1, y1 int }
	var rects []rect
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is not unique", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24-column grid", p.Title, g)
		}
		r := rect{g.X, g.Y, g.X + g.W, g.Y + g.H}
		for _, o := range rects {
			if r.x0 < o.x1 && o.x0 < r.x1 && r.y0 < o.y1 && o.y0 < r.y1 {
				t.Errorf("panel %q at %+v overlaps another panel", p.Title, g)
			}
		}
		rects = append(rects, r)
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not query through the datasource variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}

	queried := map[string]bool{}
	for _, expr := range exprs {
		if unknown := unknownMetrics(expr, registered); len(unknown) > 0 {
			t.Errorf("query %q uses metrics no collector registers: %v", expr, unknown)
		}
		for _, name := range metricName.FindAllString(expr, -1) {
			queried[name] = true
		}
		for _, v := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(expr, -1) {
			if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
				t.Errorf("query %q uses the undefined variable $%s", expr, v[1])
			}
		}
	}
	// Per gate: permits and in-flight, queue depth and wait, rejections by
	// reason, reloads; per quota: divisor and permits.
	for _, want := range []string{
		"backpressure_gate_permits", "backpressure_gate_in_flight", "backpressure_gate_queue_depth",
		"backpressure_gate_queue_wait_seconds_bucket", "backpressure_gate_rejected_total",
		"backpressure_config_reloads_total", "backpressure_quota_divisor", "backpressure_quota_permits",
	} {
		if !queried[want] {
			t.Errorf("the dashboard does not query %s", want)
		}
	}
}

// The alerting rules pass promtool check rules, query only registered
// metrics, and fire and stay quiet as testdata/alerts_test.yaml expects
// (promtool test rules).
func TestAlertRules(t *testing.T) {
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	data := readRepoFile(t, "config/prometheus/alerts.yaml")
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	registered := registeredMetrics(t)
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if unknown := unknownMetrics(r.Expr, registered); len(unknown) > 0 {
				t.Errorf("alert %s uses metrics no collector registers: %v", r.Alert, unknown)
			}
		}
	}

	// promtool reads plain rule files: the PrometheusRule's spec.
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.Marshal(doc["spec"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesFile, testFile := filepath.Join(dir, "alerts.rules.yaml"), filepath.Join(dir, "alerts_test.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := readRepoFile(t, "test/manifests/testdata/alerts_test.yaml")
	if err := os.WriteFile(testFile, tests, 0o600); err != nil {
		t.Fatal(err)
	}
	out := string(tool(t, "promtool", "check", "rules", rulesFile))
	if want := "SUCCESS: " + strconv.Itoa(len(alerts)) + " rules found"; !strings.Contains(out, want) {
		t.Errorf("promtool check rules: want %q in\n%s", want, out)
	}
	tool(t, "promtool", "test", "rules", testFile)

	// Every alert has a test that expects it to fire.
	for _, a := range alerts {
		if !slices.Contains(firingTests(t, tests), a) {
			t.Errorf("testdata/alerts_test.yaml has no case in which %s fires", a)
		}
	}
}

// firingTests returns the alerts that some test case of a promtool test
// file expects to fire.
func firingTests(t *testing.T, data []byte) []string {
	t.Helper()
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var firing []string
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing = append(firing, a.Alertname)
			}
		}
	}
	return firing
}
