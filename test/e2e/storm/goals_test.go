package storm

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// syntheticRun is a run of the default schedule in which the downstream
// completes okPerSample calls per 100 ms and rejects rejPerSample, with the
// given peak.
func syntheticRun(v Variant, okPerSample, rejPerSample, peak int64) *report.RunData {
	s := storySchedule()
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	d := &report.RunData{Name: v.Name, Description: v.Description, Operator: v.Operator, Plan: v.Plan, Downstream: theDownstream,
		MaxRetries: GatewayMaxRetries, Schedule: s, Start: start, Load: &traffic.LoadResult{Target: 1900, Duration: s.Duration, ShedReasons: map[string]int64{}}}
	var c traffic.DownstreamCounts
	for off := time.Duration(0); off <= s.Duration; off += report.SampleInterval {
		if off > 0 {
			c.OK += okPerSample
			c.Rejected += rejPerSample
		}
		c.WindowPeak = peak
		c.Peak = peak
		n := s.ReplicasAt(off)
		d.Samples = append(d.Samples, report.Sample{At: off, Downstream: c, Pods: cluster.PodCounts{Desired: n, Existing: int(n), Ready: int(n), Started: int(n)},
			Latency: s.LatencyAt(off), ReadyPermits: Usable()})
	}
	d.Final = c
	d.Final.WindowPeak = 0
	d.Load.Due = int64(1900 * s.Duration.Seconds())
	d.Load.Outcomes[traffic.OutcomeOK] = c.OK
	d.Load.Outcomes[traffic.OutcomeShed] = d.Load.Due - c.OK
	d.Load.ShedReasons["queue-full"] = d.Load.Due - c.OK
	for i := range 1000 {
		o := traffic.OutcomeShed
		lat := time.Millisecond
		if i%10 == 0 {
			o, lat = traffic.OutcomeOK, 220*time.Millisecond
		}
		d.Load.Records = append(d.Load.Records, traffic.Record{At: time.Duration(i) * 70 * time.Millisecond, Latency: lat, Outcome: o})
	}
	return d
}

func TestAnalyzeAndGoals(t *testing.T) {
	vs, err := Variants(DefaultSchedule())
	if err != nil {
		t.Fatal(err)
	}
	op := syntheticRun(vs[0], 18, 0, 40) // 180/s, no 429s
	// Eight pods reload the plan of the scale-up; the four the scale-down
	// keeps acknowledge it.
	pods := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}
	op.Published = []observe.Published{
		{Seen: op.Start.Add(-time.Second), Hash: "h8", Epoch: "e", Revision: 1, Pods: map[string]int{}},
		{Seen: op.Start.Add(25 * time.Second), Hash: "h16", Epoch: "e", Revision: 2, Pods: map[string]int{}},
	}
	for _, pod := range pods {
		op.Published[0].Pods[pod], op.Published[1].Pods[pod] = 5, 2
		op.Applied = append(op.Applied, observe.Applied{Pod: pod, Time: op.Start.Add(-900 * time.Millisecond), Hash: "h8", Permits: 5}, observe.Applied{Pod: pod, Time: op.Start.Add(25*time.Second + 80*time.Millisecond), Hash: "h16", Permits: 2})
	}
	op.Alive = pods[:4]
	op.Acks = map[string]string{"p1": "e/2", "p2": "e/2", "p3": "e/2", "p4": "e/2"}
	op.Rollout = []observe.RolloutSample{{Hash: "h16", Epoch: "e", Revision: 2, Acknowledged: 4, Total: 4}}
	static := syntheticRun(vs[1], 18, 3, 53)
	naive := syntheticRun(vs[2], 18, 100, 58)

	r := NewReport(DefaultSchedule())
	analyze := func(v Variant, d *report.RunData) *report.VariantReport {
		rep := report.Analyze(d)
		judge(v, rep)
		return rep
	}
	for i, d := range []*report.RunData{op, static, naive} {
		r.Add(analyze(vs[i], d))
	}
	// The synthetic naive run's load is not made of retries: its
	// amplification gets figures that agree with the model (the measurement
	// has TestRetryAmplification, the goal TestAmplificationGoals).
	for i := range r.Variants["naive"].RetryAmplification {
		a := &r.Variants["naive"].RetryAmplification[i]
		a.Requests, a.Measured, a.FixedPoint, a.Attempts, a.MeasuredRejection, a.FixedPointRejection = 100, 1.9, 1.9, 190, 0.9, 0.9
	}
	judge(vs[2], r.Variants["naive"])
	r.Add(r.Variants["naive"])
	o := r.Variants["operator"]
	if o.Downstream429 != 0 || o.PeakInFlight != 40 || o.GoodputPerSecond < 179 || o.GoodputPerSecond > 181 {
		t.Errorf("operator: %+v", o)
	}
	for _, p := range o.Phases {
		if p.GoodputPerSecond < 179.9 || p.GoodputPerSecond > 180.1 {
			t.Errorf("phase %q goodput %v, want 180", p.Name, p.GoodputPerSecond)
		}
	}
	if rl := o.ReloadLatencySeconds; rl == nil || rl.Count != 8 || rl.P99 < 0.079 || rl.P99 > 0.081 {
		t.Errorf("reload latency %+v, want eight reloads of 80ms", rl)
	}
	if diff := cmp.Diff(&report.RolloutReport{Acknowledged: 4, Total: 4, Last: "e/2", Current: true}, o.Rollout); diff != "" {
		t.Errorf("rollout (-want +got):\n%s", diff)
	}
	if n := r.Variants["naive"]; n.Downstream429Fraction < 0.84 || n.Downstream429Fraction > 0.85 {
		t.Errorf("naive 429 fraction %v, want 100/118", n.Downstream429Fraction)
	}
	if failed := r.Failed(); len(failed) != 0 {
		t.Errorf("goals failed on a run that meets them: %+v", failed)
	}

	// The same run with one 429, a slow reload, a pod still at the previous
	// revision and a 5 s dip to half the usable permits misses exactly
	// those goals.
	op.Final.Rejected = 1
	op.Applied[1].Time = op.Start.Add(27 * time.Second)
	op.Acks["p2"] = "e/1"
	for i := range op.Samples {
		if op.Samples[i].At >= 30*time.Second && op.Samples[i].At < 35*time.Second {
			op.Samples[i].ReadyPermits = Usable() / 2
		}
	}
	r.Add(analyze(vs[0], op))
	var failed []string
	for _, g := range r.Failed() {
		failed = append(failed, g.Variant+": "+g.Goal)
	}
	if diff := cmp.Diff([]string{"operator: no downstream 429s", "operator: reload latency p99",
		"operator: every running pod acknowledged the last plan", "operator: permits held by Ready pods, integrated over the run"}, failed); diff != "" {
		t.Errorf("failed goals (-want +got):\n%s", diff)
	}

	t.Run("JSON contract", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "report.json")
		if err := r.WriteJSON(path); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc["contract"] != float64(Contract) {
			t.Errorf("contract = %v", doc["contract"])
		}
		variants := doc["variants"].(map[string]any)
		for _, name := range []string{"operator", "static", "naive"} {
			v, ok := variants[name].(map[string]any)
			if !ok {
				t.Fatalf("variants.%s missing", name)
			}
			for _, key := range []string{"downstream429", "peakInFlight", "localSheds", "goodputPerSecond", "gatewayP99Seconds"} {
				if _, ok := v[key].(float64); !ok {
					t.Errorf("variants.%s.%s missing or not a number", name, key)
				}
			}
		}
		rl := variants["operator"].(map[string]any)["reloadLatencySeconds"].(map[string]any)
		for _, key := range []string{"p50", "p99"} {
			if _, ok := rl[key].(float64); !ok {
				t.Errorf("variants.operator.reloadLatencySeconds.%s missing", key)
			}
		}
	})

	t.Run("table", func(t *testing.T) {
		var b bytes.Buffer
		if err := report.WriteTable(&b, r); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"operator", "static", "naive", "NOT MET", "reported", "steady, 8 pods (steady)"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		b.Reset()
		if err := report.WriteMarkdown(&b, r); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), "| variant | downstream 429s |") {
			t.Errorf("markdown:\n%s", b.String())
		}
	})

	t.Run("plot", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "storm.png")
		if err := report.WritePlot(r, path); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 800 {
			t.Errorf("plot is %v; too small to read", b)
		}
	})
}
