//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// The harness passes every pod examples/gateway's command line, retry
// flags included; the proxy pod takes it.
func TestParseTakesTheGatewaysCommandLine(t *testing.T) {
	c, err := parse([]string{"--listen", "127.0.0.1:0", "--downstream", "http://127.0.0.1:1", "--gate", "logistics-api",
		"--configmap", "cm", "--namespace", "ns", "--kubeconfig", "/k", "--acknowledge", "--metrics-listen", "127.0.0.1:0",
		"--max-retries", "1", "--retry-on-429"})
	if err != nil {
		t.Fatal(err)
	}
	if c.gate != "logistics-api" || c.configMap != "cm" || !c.acknowledge || c.deadline != 2*time.Second {
		t.Errorf("config %+v", c)
	}
	if _, err := parse([]string{"--gate", "g"}); err == nil {
		t.Error("no --downstream: no error")
	}
}

// The gateway's own plan is valid and never binds: the proxy is the pod's
// only gate.
func TestApplicationPlanNeverBinds(t *testing.T) {
	dir := t.TempDir()
	if err := writeApplicationPlan(dir, config{gate: "logistics-api", deadline: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "logistics-api.json"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := plan.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Permits < unboundedPermits || d.QueueCapacity != 0 || d.RatePerSecond != 0 || d.Deadline() != 2*time.Second {
		t.Errorf("application plan %+v", d)
	}
}
