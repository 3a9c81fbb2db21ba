package quota

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// schemaBounds walks a CRD's spec schema and returns the maximum of every
// integer field by path, and the paths of the duration fields (strings
// with the duration syntax rule) that lack the rule bounding them by
// MaxDuration.
func schemaBounds(t *testing.T, file string) (maximums map[string]int64, unbounded []string, durations int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	maximums = map[string]int64{}
	var walk func(path string, s crdSchema)
	walk = func(path string, s crdSchema) {
		switch s.Type {
		case "integer":
			if s.Maximum == nil {
				maximums[path] = -1
			} else {
				maximums[path] = *s.Maximum
			}
		case "string":
			isDuration, bounded := false, false
			for _, r := range s.Validations {
				isDuration = isDuration || r.Message == "must be a duration such as 220ms or 1.5s"
				bounded = bounded || strings.HasSuffix(r.Rule, "duration(self) <= duration('1h')") && r.Message == "must be at most 1h"
			}
			if isDuration {
				durations++
				if !bounded {
					unbounded = append(unbounded, path)
				}
			}
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
	}
	walk("spec", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"])
	return maximums, unbounded, durations
}

type crdSchema struct {
	Type        string               `json:"type"`
	Maximum     *int64               `json:"maximum"`
	Properties  map[string]crdSchema `json:"properties"`
	Validations []struct {
		Rule    string `json:"rule"`
		Message string `json:"message"`
	} `json:"x-kubernetes-validations"`
}

// The CRDs bound every count, rate and duration of both specs, with the
// bounds of QuotaMaximums, ContractMaximums and MaxDuration.
func TestTheAPIHasTheBounds(t *testing.T) {
	if d, err := time.ParseDuration("1h"); err != nil || d != MaxDuration {
		t.Fatalf("the CRDs' rule bounds durations by 1h, MaxDuration is %s", MaxDuration)
	}
	for _, c := range []struct {
		file      string
		table     []Maximum
		durations int
	}{
		// typical and worst latency, deadline, max queue wait, acquire
		// timeout and the handover's two.
		{"backpressure.dev_downstreamquotas.yaml", QuotaMaximums, 7},
		{"backpressure.dev_downstreamcontracts.yaml", ContractMaximums, 2},
	} {
		file, table := c.file, c.table
		got, unbounded, durations := schemaBounds(t, file)
		want := map[string]int64{}
		for _, m := range table {
			want[m.Path] = m.Max
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: integer fields and their maximums (-table +CRD, -1 is none):\n%s", file, diff)
		}
		if len(unbounded) > 0 || durations != c.durations {
			slices.Sort(unbounded)
			t.Errorf("%s: %d durations, want %d; not bounded by %s: %v", file, durations, c.durations, MaxDuration, unbounded)
		}
	}
}

// A spec from a file meets the API's bounds in Size, the out-of-memory
// quota (a huge concurrency and no demand) included.
func TestSizeRejectsWhatTheAPIRefuses(t *testing.T) {
	hour := func(extra time.Duration) *metav1.Duration { return &metav1.Duration{Duration: time.Hour + extra} }
	for _, tt := range []struct {
		change func(*v1alpha1.DownstreamQuotaSpec)
		want   string
	}{
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.Concurrency = 2147483647; s.Demand = nil },
			"spec.contract.concurrency: must be at most 1048575, got 2147483647"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Contract.RatePerSecond, s.Contract.Burst = 1_000_000_001, 1 },
			"spec.contract.ratePerSecond: must be at most 1000000000, got 1000000001"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Demand.InFlight = ptr[int32](1 << 20) },
			"spec.demand.inFlight: must be at most 1048575, got 1048576"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Retry.BudgetPerSecond = 1 << 30 },
			"spec.retry.budgetPerSecond: must be at most 1000000000, got 1073741824"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Deadline = *hour(time.Nanosecond) },
			"spec.deadline: must be at most 1h0m0s, got 1h0m0.000000001s"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Latency.Worst = hour(time.Second) },
			"spec.latency.worst: must be at most 1h0m0s, got 1h0m1s"},
		{func(s *v1alpha1.DownstreamQuotaSpec) { s.Handover.StalledAfter = hour(time.Minute) },
			"spec.handover.stalledAfter: must be at most 1h0m0s, got 1h1m0s"},
	} {
		spec := designSpec()
		tt.change(&spec)
		if _, err := Size(spec, 8); err == nil || err.Error() != tt.want {
			t.Errorf("Size() error = %v, want %q", err, tt.want)
		}
	}
	// The bounds are inclusive.
	spec := designSpec()
	spec.Contract.Concurrency, spec.Deadline.Duration = 1<<20-1, time.Hour
	if _, err := Size(spec, 1); err != nil {
		t.Errorf("Size() at the bounds: %v", err)
	}
}
