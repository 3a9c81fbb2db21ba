package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// The plan table states the division with sizing's text, the text the
// quota's status (its diagnostics) and the controller's events quote: for
// each replica count, the CLI prints the division's equation and holdings
// and every status diagnostic word for word.
func TestPlanArithmeticIsTheStatusAndEventText(t *testing.T) {
	q, err := loadQuota("testdata/sample-quota.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		replicas int32
		belowOne v1alpha1.BelowOnePolicy
	}{{8, ""}, {21, ""}, {41, ""}, {100, ""}, {100, v1alpha1.BelowOneAtLeastOne}} {
		spec := q.Spec
		args := []string{"plan", "-f", "testdata/sample-quota.yaml", "--replicas", strconv.Itoa(int(tt.replicas))}
		if tt.belowOne != "" {
			spec.BelowOne = tt.belowOne
			args = append(args, "--below-one", string(tt.belowOne))
		}
		p, err := quota.Size(spec, tt.replicas)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		d := p.Result.Division(int(tt.replicas))
		want := []string{d.Equation(), d.Holds()}
		for _, diag := range p.Diagnostics {
			want = append(want, diag.Message)
		}
		for _, w := range want {
			if !containsSpaced(stdout, w) {
				t.Errorf("%d replicas, below one %q: the plan table lacks %q:\n%s", tt.replicas, tt.belowOne, w, stdout)
			}
		}
		if tt.replicas == 100 && tt.belowOne == "" && !strings.Contains(stdout, "40 usable permits = 0 × 100 + 40") {
			t.Errorf("100 replicas: the equation is not the one the events give:\n%s", stdout)
		}
	}
}

// The plan's JSON output carries every per-pod field of the plan model
// under its document key, with the share's value.
func TestPlanJSONCarriesThePlanModel(t *testing.T) {
	q, err := loadQuota("testdata/sample-quota.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := quota.Size(q.Spec, 21)
	if err != nil {
		t.Fatal(err)
	}
	share := p.Result.ShareFor(int(p.Result.Base) + 1)
	raw, err := json.Marshal(perPodJSONOf(share))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]float64
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	d := plan.Document{}.WithShare(share.PodShare)
	d.MaxQueueWaitSeconds, d.AcquireTimeoutSeconds = share.MaxQueueWait.Seconds(), share.AcquireTimeout.Seconds()
	raw, err = json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for _, f := range plan.Fields() {
		if f.Key == "latencySeconds" || f.Key == "deadlineSeconds" {
			continue // the quota's, not a share's
		}
		if v, ok := got[f.Key]; !ok || v != want[f.Key] {
			t.Errorf("plan -o json perPod.%s = %v (present %v), want %v", f.Key, v, ok, want[f.Key])
		}
	}
}
