//go:build linux

package backpressure_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// TestTwoEnforcersOfAGateInOnePod starts two enforcers of a gate in the
// same pod (as a sidecar proxy beside the library would be): each would
// enforce the whole share, so one of them refuses to start, naming the
// gate, while another pod's enforcer of it starts; once the first is gone,
// a new one starts.
func TestTwoEnforcersOfAGateInOnePod(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Doc("logistics-api", 4))
	opts := backpressure.Options{Gates: []string{"logistics-api"}, PodName: "api-0", PodNamespace: "shop", DrainTimeout: time.Second}
	other := opts
	other.PodName = "api-1"
	run := func(opts backpressure.Options, d time.Duration) <-chan error {
		rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), opts)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), d)
		go func() {
			defer cancel()
			done <- rt.Start(ctx)
		}()
		return done
	}
	a, b, c := run(opts, time.Second), run(opts, time.Second), run(other, time.Second)
	errA, errB, errC := <-a, <-b, <-c
	if errC != nil {
		t.Errorf("another pod's enforcer: %v", errC)
	}
	refused := errA
	if refused == nil {
		refused = errB
	} else if errB != nil {
		t.Fatalf("both enforcers of the pod refused to start: %v; %v", errA, errB)
	}
	if refused == nil || !strings.Contains(refused.Error(), `"logistics-api"`) || !strings.Contains(refused.Error(), "enforced by another process of this pod") {
		t.Fatalf("two enforcers of a gate in one pod started: %v, %v", errA, errB)
	}
	if err := <-run(opts, 200*time.Millisecond); err != nil {
		t.Errorf("an enforcer started after the others ended: %v", err)
	}
}
