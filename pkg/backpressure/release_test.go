package backpressure_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/sharetest"
)

// The pod and gate of the acknowledgement tests; those that need an API
// server are in internal/apitest/backpressure.
const (
	ackPod  = "gateway-a"
	ackGate = "logistics-api"
	ackKey  = plan.AppliedAnnotationPrefix + ackGate
)

// settle is long enough for many polls of the Runtime and a patch round
// trip: what has not happened by then will not.
const settle = 400 * time.Millisecond

// The fake clientset stands in for the API server where the test is about
// what is patched when, not about the server: a release that cannot be
// written is bounded by ReleaseTimeout and reported by Start.
func TestReleaseIsBoundedInTime(t *testing.T) {
	dir := t.TempDir()
	sharetest.WritePlan(t, dir, sharetest.Divided(2, 1, map[string]int{ackPod: 3, "gateway-b": 2}))
	client := fake.NewClientset() // no pod: every patch fails
	rt, err := backpressure.New(t.Context(), backpressure.FromDir(dir), backpressure.Options{
		PodName:      ackPod,
		PodNamespace: "shop",
		Ack: &backpressure.AckOptions{
			Client:  client,
			Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: 50 * time.Millisecond},
		},
		ReleaseTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	began := time.Now()
	err = rt.Start(ctx)
	if err == nil {
		t.Fatal("Start returned nil though the release could not be written")
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Start took %v with a 300ms release timeout", took)
	}
	t.Logf("Start took %v: %v", time.Since(began), err)
}
