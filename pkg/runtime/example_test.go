package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/internal/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/retry"
)

// examplePlans writes one plan into a new directory, as the kubelet does
// when it mounts the workload's ConfigMap.
func examplePlans(permits int) string {
	dir, err := os.MkdirTemp("", "plans")
	if err != nil {
		panic(err)
	}
	d := plan.Document{Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "0f1e-uid", Revision: 1,
		Permits: permits, QueueCapacity: 9, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1, LatencySeconds: 0.22,
		DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 1.25}
	if permits == 0 {
		// A share without a permit grants nothing else either.
		d.QueueCapacity, d.RetryBudgetPerSecond = 0, 0
	}
	d.Hash = plan.Hash(d)
	data, err := plan.Marshal(d)
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, plan.KeyFor(d.Gate)), data, 0o644); err != nil {
		panic(err)
	}
	return dir
}

// Enforce the plans of a mounted ConfigMap and follow their changes.
func ExampleNew() {
	dir := examplePlans(5) // normally the volume's mount path
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rt, err := runtime.New(ctx, runtime.FromDir(dir), runtime.Options{
		Gates:      []string{"logistics-api"}, // fail here, at start, without a plan for it
		Registerer: prometheus.NewRegistry(),  // the registry the pod's /metrics serves
		OnApplied: func(a runtime.Applied) {
			fmt.Println("applied", a.Plan.Gate, "permits", a.Plan.Limits.Permits, "queue", a.Plan.Limits.QueueCapacity)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = rt.Start(ctx) }() // resizes the gate on every change until ctx ends

	// Gate the calls to the downstream, here by hand; httpmw and grpcmw do it
	// for HTTP clients and gRPC connections.
	err = rt.Gate("logistics-api").Do(ctx, func(ctx context.Context) error {
		return nil // call the downstream
	})
	fmt.Println("call:", err)
	// Output:
	// applied logistics-api permits 5 queue 9
	// call: <nil>
}

// A gate the service needs but the source does not hold is an error of New:
// the pod fails at start instead of shedding everything.
func ExampleNew_missingGate() {
	dir := examplePlans(5)
	defer func() { _ = os.RemoveAll(dir) }()

	_, err := runtime.New(context.Background(), runtime.FromDir(dir), runtime.Options{
		Gates: []string{"payments"},
	})
	fmt.Println(errors.Is(err, runtime.ErrNoPlan))
	fmt.Println(err)
	// Output:
	// true
	// runtime: reload: no valid plan document for gate "payments"; the source holds plans for ["logistics-api"]
}

// Start on a conservative share of the application's own when no published
// plan is there yet, here an empty mounted volume, and take the published
// plan as soon as it appears.
func ExampleNew_bootstrap() {
	dir, err := os.MkdirTemp("", "plans") // the volume, mounted optional: true
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	rt, err := runtime.New(context.Background(), runtime.FromDir(dir), runtime.Options{
		Gates: []string{"logistics-api"},
		// The contract (40 in flight, 100/s) divided by the HPA's
		// maxReplicas (10); kubectl backpressure plan prints it.
		Bootstrap: []runtime.Plan{{
			Gate: "logistics-api",
			Limits: gate.Limits{Permits: 4, RatePerSecond: 10, Burst: 10, QueueCapacity: 4,
				MaxQueueWait: 500 * time.Millisecond, AcquireTimeout: time.Second, TypicalLatency: 50 * time.Millisecond},
			Workers: 4, RetryBudgetPerSecond: 1,
		}},
		BootstrapWait: 100 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := rt.Plan("logistics-api")
	fmt.Printf("permits %d, epoch %q\n", rt.Gate("logistics-api").Limits().Permits, p.Epoch)
	// Output:
	// permits 4, epoch ""
}

// Follow the ConfigMap through the API server, enforce this pod's own share
// and acknowledge each revision on the pod. The service account needs get,
// list and watch on the ConfigMap and patch on pods; POD_NAME and
// POD_NAMESPACE come from the downward API.
func ExampleFromConfigMap() {
	ctx := context.Background()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		panic(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	rt, err := runtime.New(ctx, runtime.FromConfigMap(client, os.Getenv("POD_NAMESPACE"), "search-gateway-backpressure"),
		runtime.Options{Gates: []string{"logistics-api"}, Ack: &runtime.AckOptions{}})
	if err != nil {
		panic(err)
	}
	follow, stopFollowing := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() { started <- rt.Start(follow) }()

	// ... serve until SIGTERM, then stop taking requests (http.Server.Shutdown)
	// ...
	// Then hand the pod's shares back: Start closes the gates, waits for the
	// calls in flight and annotates the pod "<epoch>/released" before it
	// returns, so the operator gives the shares to the other pods at once.
	stopFollowing()
	if err := <-started; err != nil {
		log.Print(err)
	}
}

// Retry a downstream's transient failures from the gate's retry budget, so
// that retries stay within the workload's share of the global budget. Local
// rejections are never retried.
func ExampleRuntime_Budget() {
	dir := examplePlans(0) // a share too small for one call: every call is shed
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.FromDir(dir), runtime.Options{Gates: []string{"logistics-api"}})
	if err != nil {
		panic(err)
	}

	attempts := 0
	policy := retry.Policy{
		MaxRetries: 2,
		Budget:     rt.Budget("logistics-api"),
		Retryable:  func(err error) bool { return errors.Is(err, errUnavailable) },
	}
	err = retry.Do(ctx, policy, func(ctx context.Context) error {
		attempts++
		return rt.Gate("logistics-api").Do(ctx, func(ctx context.Context) error {
			return errUnavailable // a 503 from the downstream, say
		})
	})
	fmt.Println("attempts:", attempts, "shed:", errors.Is(err, gate.ErrRejected))
	// Output:
	// attempts: 1 shed: true
}

var errUnavailable = errors.New(http.StatusText(http.StatusServiceUnavailable))
