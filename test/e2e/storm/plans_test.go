package storm

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

func TestStaticPlan(t *testing.T) {
	tests := []struct {
		replicas int32
		permits  int
	}{
		{8, 5},  // floor(50 × 0.8 / 8)
		{16, 2}, // floor(50 × 0.8 / 16)
		{4, 10},
	}
	for _, tt := range tests {
		d, err := StaticPlan(tt.replicas)
		if err != nil {
			t.Fatal(err)
		}
		if d.Permits != tt.permits || d.Gate != QuotaName || d.Hash != plan.Hash(d) {
			t.Errorf("StaticPlan(%d) = %+v, want %d permits for gate %s with its hash", tt.replicas, d, tt.permits, QuotaName)
		}
		if d.LatencySeconds != TypicalLatency.Seconds() {
			t.Errorf("StaticPlan(%d) latency %v, want the quota's typical latency", tt.replicas, d.LatencySeconds)
		}
		if got := int64(d.Permits) * int64(tt.replicas); got > Contract*SafetyPercent/100 {
			t.Errorf("StaticPlan(%d): %d permits in all, above the handed-out part of the contract", tt.replicas, got)
		}
	}
}

func TestNaivePlan(t *testing.T) {
	d, err := NaivePlan()
	if err != nil {
		t.Fatal(err)
	}
	if d.Permits != Contract || d.QueueCapacity != 0 || d.RetryBudgetPerSecond < RequestsPerSecond {
		t.Errorf("NaivePlan() = %+v: want the whole contract per pod, no queue, retries that no budget stops", d)
	}
}

func TestWritePlanDir(t *testing.T) {
	d, err := StaticPlan(8)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "plans")
	if err := WritePlanDir(dir, d); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, QuotaName+".json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := plan.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, d) {
		t.Errorf("read back %+v, want %+v", got, d)
	}
}

func TestManifests(t *testing.T) {
	q, err := Quota()
	if err != nil {
		t.Fatal(err)
	}
	if q.Name != QuotaName || q.Spec.WorkloadRef.Name != WorkloadName || q.Spec.Contract.Concurrency != Contract ||
		q.Spec.SafetyPercent != SafetyPercent || q.Spec.Latency.Typical.Duration != TypicalLatency ||
		q.Spec.Latency.Worst.Duration != WorstLatency || q.Spec.Demand.RatePerSecond != RequestsPerSecond {
		t.Errorf("manifests/quota.yaml disagrees with the scenario's constants: %+v", q.Spec)
	}
	if q.Spec.Deadline.Duration < WorstLatency {
		t.Errorf("deadline %v is below the worst latency: slow calls would be cut off", q.Spec.Deadline.Duration)
	}
	dir := t.TempDir()
	if err := WriteManifests(dir); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(WorkloadManifests, QuotaManifest) {
		if _, err := os.Stat(filepath.Join(dir, m)); err != nil {
			t.Error(err)
		}
	}
}
