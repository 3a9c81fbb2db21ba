package reload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// Follow the ConfigMap through the API server. The pod's service account
// needs only get, list and watch on this one ConfigMap (a Role with
// resourceNames), plus patch on pods when acknowledging.
func ExampleNewConfigMapSource() {
	ctx := context.Background()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)

	src, err := reload.NewConfigMapSource(ctx, client, "shop", "search-gateway-backpressure", reload.Options{
		Subscriber: func(u reload.Update) {
			for _, gate := range u.Changed {
				fmt.Println("apply", gate, u.Plans[gate].Permits)
			}
		},
		Logger:     logr.Discard(),
		Registerer: prometheus.NewRegistry(),
		// POD_NAME and POD_NAMESPACE come from the downward API.
		Ack: &reload.AckOptions{},
	})
	if err != nil {
		panic(err) // no valid plan: fail the pod's start
	}
	go func() { _ = src.Start(ctx) }()
}

// Follow the ConfigMap mounted as a volume.
func ExampleNewDirSource() {
	dir, _ := os.MkdirTemp("", "plans")
	defer func() { _ = os.RemoveAll(dir) }()
	d := plan.Document{Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "0f1e-uid", Revision: 1,
		Permits: 5, QueueCapacity: 9,
		MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1, LatencySeconds: 0.22, DeadlineSeconds: 2,
		Workers: 5, RetryBudgetPerSecond: 1.25}
	data, _ := plan.Marshal(d)
	_ = os.WriteFile(filepath.Join(dir, plan.KeyFor(d.Gate)), data, 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	src, err := reload.NewDirSource(dir, reload.DirOptions{Options: reload.Options{
		Subscriber: func(u reload.Update) {
			for _, gate := range u.Changed {
				p := u.Plans[gate]
				fmt.Println("apply", gate, "permits", p.Permits, "queue", p.QueueCapacity, "wait", p.MaxQueueWait())
			}
			cancel() // a real service keeps running; the example stops here
		},
	}})
	if err != nil {
		panic(err)
	}
	_ = src.Start(ctx) // blocks until ctx ends
	// Output:
	// apply logistics-api permits 5 queue 9 wait 100ms
}
