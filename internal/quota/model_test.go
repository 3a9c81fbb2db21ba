package quota

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// statusOnly are status.perPod's figures that pods do not enforce.
var statusOnly = map[string]bool{"capacityPerSecond": true}

// numbers decodes v's JSON into numbers by key; quantities ("1250m") and
// durations ("100ms") become plain numbers (seconds for durations), other
// strings are left out.
func numbers(t *testing.T, v any) map[string]float64 {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for k, x := range m {
		switch x := x.(type) {
		case float64:
			out[k] = x
		case string:
			if q, err := resource.ParseQuantity(x); err == nil {
				out[k] = q.AsApproximateFloat64()
			} else if d, err := time.ParseDuration(x); err == nil {
				out[k] = d.Seconds()
			}
		}
	}
	return out
}

// Every field of the plan model reaches the status, the published document
// and the validation table with the same value: for a set of quotas and
// divisors, each pod's share in the document and the status built from the
// same sizing share agree field by field, and status.perPod has no number
// the table lacks.
func TestOneModelReachesStatusAndDocument(t *testing.T) {
	keys := map[string]bool{}
	for _, f := range plan.Fields() {
		keys[f.Key] = true
	}
	status := reflect.TypeFor[v1alpha1.PerPodPlan]()
	for i := range status.NumField() {
		key, _, _ := strings.Cut(status.Field(i).Tag.Get("json"), ",")
		if !keys[key] && !keys[key+"Seconds"] && !statusOnly[key] {
			t.Errorf("status.perPod.%s is in no row of plan.Fields", key)
		}
	}
	for _, f := range plan.Fields() {
		if f.PerPod {
			if _, ok := status.FieldByNameFunc(func(n string) bool { return strings.EqualFold(n, f.Key) }); !ok {
				t.Errorf("plan field %s is not in status.perPod", f.Key)
			}
		}
	}

	for _, tt := range []struct {
		change  func(*v1alpha1.DownstreamQuotaSpec)
		divisor int32
	}{
		{func(*v1alpha1.DownstreamQuotaSpec) {}, 8},
		{func(*v1alpha1.DownstreamQuotaSpec) {}, 21},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.RatePerSecond, s.Contract.Burst = 300, 40 }, 7},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Demand = nil; s.Contract.Concurrency = plan.MaxPermits }, 3},
	} {
		spec := designSpec()
		tt.change(&spec)
		p, err := Size(spec, tt.divisor)
		if err != nil {
			t.Fatal(err)
		}
		for _, permits := range []int{int(p.Result.Base), int(p.Result.Base) + 1, 0} {
			share := p.Result.ShareFor(permits)
			doc := numbers(t, p.Document("g", "d", 1, Shares{Epoch: "e", Revision: 1, Base: permits}))
			st := numbers(t, perPodStatus(share))
			if err := plan.Validate(p.Document("g", "d", 1, Shares{Epoch: "e", Revision: 1, Base: permits})); err != nil {
				t.Errorf("divisor %d, %d permits: the document is invalid: %v", tt.divisor, permits, err)
			}
			for _, f := range plan.Fields() {
				dv, ok := doc[f.Key]
				if !ok {
					t.Fatalf("the document lacks %s", f.Key)
				}
				sv, ok := st[f.Key]
				if !ok {
					sv, ok = st[strings.TrimSuffix(f.Key, "Seconds")]
				}
				if !ok {
					// The latency and the deadline are in the spec, not
					// in status.perPod.
					if f.Key != "latencySeconds" && f.Key != "deadlineSeconds" {
						t.Errorf("status.perPod lacks %s", f.Key)
					}
					continue
				}
				// Status rates are rounded to thousandths.
				if diff := dv - sv; diff > 0.0005 || diff < -0.0005 {
					t.Errorf("divisor %d, %d permits: %s is %v in the document and %v in the status", tt.divisor, permits, f.Key, dv, sv)
				}
			}
		}
	}
}
