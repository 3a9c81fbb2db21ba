//go:build unix

package storm

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

func TestTwoCallers(t *testing.T) {
	cs := TwoCallers()
	if err := cs.Validate(); err != nil {
		t.Fatal(err)
	}
	// A part worked out wrong, so that the parts do not add up to the
	// usable permits, is refused before a run.
	wrong := TwoCallers()
	wrong.Callers[0].Part = 10
	if err := wrong.Validate(); err == nil || !strings.Contains(err.Error(), "add up to 34, not the 40 usable permits") {
		t.Errorf("Validate() with parts 10 and 24 = %v", err)
	}
	for _, c := range cs.Callers {
		objs, err := CallerObjects(c)
		if err != nil {
			t.Fatal(err)
		}
		q, ok := objs[2].(*v1alpha1.DownstreamQuota)
		if !ok || q.Spec.Contract != nil || q.Spec.ContractRef == nil || q.Spec.ContractRef.Name != ContractName ||
			q.Spec.Weight != c.Weight || q.Namespace != c.Namespace || q.Spec.WorkloadRef.Name != c.Name {
			t.Errorf("quota of %s: %+v", c.Name, objs[2])
		}
		if (c.DemandInFlight > 0) != (q.Spec.Demand != nil) {
			t.Errorf("quota of %s: demand %+v, want in flight %d", c.Name, q.Spec.Demand, c.DemandInFlight)
		}
		if objs[0].GetName() != c.Name || objs[0].GetNamespace() != c.Namespace {
			t.Errorf("deployment of %s: %s/%s", c.Name, objs[0].GetNamespace(), objs[0].GetName())
		}
	}
	if dc, err := ContractObject(); err != nil || dc.Spec.Contract.Concurrency != Contract || dc.Spec.SafetyPercent != SafetyPercent {
		t.Errorf("ContractObject() = %+v, %v", dc, err)
	}
}

func TestAnalyzeCallers(t *testing.T) {
	cs := TwoCallers()
	d := cs.data()
	d.Final = traffic.DownstreamCounts{OK: 5000, Peak: 40}
	d.Status = &v1alpha1.DownstreamContractStatus{Callers: []v1alpha1.CallerStatus{
		{Namespace: cs.Callers[0].Namespace, Quota: QuotaName, Permits: 16},
		{Namespace: cs.Callers[1].Namespace, Quota: QuotaName, Permits: 24},
	}}
	parts := map[string]int32{cs.Callers[0].Namespace + "/" + QuotaName: 16, cs.Callers[1].Namespace + "/" + QuotaName: 24}
	// Each caller's Ready pods follow its steps 2 s late; search's 3 pods
	// left after its scale-down at 22 s hold only 14 of its 16 permits
	// until searchSettled.
	searchSettled := 27 * time.Second
	samples := func() []report.CallersSample {
		var out []report.CallersSample
		for off := time.Duration(0); off <= cs.Duration; off += report.SampleInterval {
			sm := report.CallersSample{At: off, Parts: parts, Downstream: traffic.DownstreamCounts{WindowPeak: 40}}
			for i, c := range cs.Callers {
				ready := int(c.replicasAt(off - 2*time.Second))
				permits := []int{16, 24}[i]
				if i == 0 && off >= 24*time.Second && off < searchSettled {
					permits = 14
				}
				sm.Callers = append(sm.Callers, report.CallerSample{Pods: cluster.PodCounts{Ready: ready}, ReadyPermits: permits})
			}
			out = append(out, sm)
		}
		return out
	}
	d.Samples = samples()
	r := analyzeCallers(d)
	if f := r.Failed(); len(f) != 0 {
		t.Errorf("goals failed on a run that meets them: %+v", f)
	}
	// The polling checkpoint took the first sample that met it.
	last := r.Callers[0].Checkpoints[len(cs.Checkpoints)-1]
	if want := (report.CallerCheckpoint{At: 27, ReadyPods: 3, ReadyPermits: 16, StatusPart: 16, From: 24, Within: 8, WantReadyPods: 3}); last != want {
		t.Errorf("search's last checkpoint = %+v, want %+v", last, want)
	}
	failedGoals := func(r *report.CallersReport) []string {
		var failed []string
		for _, g := range r.Failed() {
			failed = append(failed, g.Goal)
		}
		return failed
	}
	// Search's pods never reaching 16 within the window fail its
	// checkpoint goal, as does reaching it on more pods than the step left.
	for _, tc := range []struct {
		name   string
		change func(sm *report.CallersSample)
	}{
		{"never within the bound", func(sm *report.CallersSample) {
			if sm.At >= 24*time.Second && sm.At <= 32*time.Second {
				sm.Callers[0].ReadyPermits = 14
			}
		}},
		{"the old pods, not the step's", func(sm *report.CallersSample) {
			if sm.At >= 24*time.Second {
				sm.Callers[0].Pods.Ready = 8
			}
		}},
	} {
		d.Samples = samples()
		for i := range d.Samples {
			tc.change(&d.Samples[i])
		}
		if diff := cmp.Diff([]string{"search-gateway's Ready pods hold its fair part at every checkpoint"}, failedGoals(analyzeCallers(d))); diff != "" {
			t.Errorf("%s: failed goals (-want +got):\n%s", tc.name, diff)
		}
	}
	d.Samples = samples()
	// Search holding 20 at one checkpoint (taken from checkout) misses
	// search's checkpoint goal only.
	for i := range d.Samples {
		if d.Samples[i].At > 14*time.Second && d.Samples[i].At <= 15*time.Second {
			d.Samples[i].Callers = []report.CallerSample{{ReadyPermits: 20}, {ReadyPermits: 24}}
		}
	}
	r = analyzeCallers(d)
	if diff := cmp.Diff([]string{"search-gateway's Ready pods hold its fair part at every checkpoint"}, failedGoals(r)); diff != "" {
		t.Errorf("failed goals (-want +got):\n%s", diff)
	}
	var b strings.Builder
	if err := report.WriteCallersTable(&b, r); err != nil || !strings.Contains(b.String(), "checkout-gateway") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	if err := report.WriteCallersPlot(r, t.TempDir()+"/p.png"); err != nil {
		t.Error(err)
	}
}
