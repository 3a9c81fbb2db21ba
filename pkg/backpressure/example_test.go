package backpressure_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// examplePlans writes the plan d of the gate logistics-api, as the operator
// publishes it, into a new directory, as the kubelet does when it mounts
// the workload's ConfigMap. permits and rate are this pod's share; rate 0
// means no rate limit.
func examplePlans(permits int, rate float64) string {
	dir, err := os.MkdirTemp("", "plans")
	if err != nil {
		panic(err)
	}
	d := plan.Document{Version: plan.CurrentVersion, Gate: "logistics-api", Epoch: "0f1e-uid", Revision: 1,
		Permits: permits, QueueCapacity: 9, MaxQueueWaitSeconds: 0.1, AcquireTimeoutSeconds: 0.1, LatencySeconds: 0.22,
		DeadlineSeconds: 2, Workers: permits, RetryBudgetPerSecond: 1.25}
	if rate > 0 {
		d.RatePerSecond, d.Burst = rate, 2
	}
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

// exampleDownstream stands for the logistics API: /quote answers, /busy is
// overloaded.
func exampleDownstream() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "42 EUR")
	}))
}

// A pod's whole life with the library: enforce its share of the logistics
// API, tell a call this pod shed from one the downstream failed, then stop
// and hand the share back. The plan here admits two calls at once and, for
// the example, one call a minute after a burst of two.
func Example() {
	planDir := examplePlans(2, 1.0/60) // normally the mounted ConfigMap, "/etc/backpressure"
	defer func() { _ = os.RemoveAll(planDir) }()
	logistics := exampleDownstream() // normally "https://logistics.example.com"
	defer logistics.Close()

	if err := run(context.Background(), planDir, logistics.URL); err != nil {
		log.Fatal(err)
	}
	// Output:
	// ok: 200 OK
	// remote failure: 503 Service Unavailable
	// shed locally (rate_limited): answer from a fallback, never retry
	// stopped, share handed back
}

// README:begin

// run enforces this pod's share of the logistics API on its calls until
// the work is done, then hands the share back.
func run(ctx context.Context, planDir, logisticsURL string) error {
	rt, err := backpressure.New(ctx, backpressure.FromDir(planDir), backpressure.Options{
		Gates:      []string{"logistics-api"}, // no plan for it: New fails, at start
		Registerer: prometheus.NewRegistry(),  // the registry the pod's /metrics serves
	})
	if err != nil {
		return err
	}
	logisticsGate, err := rt.Gate("logistics-api")
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &httpmw.Transport{Gate: logisticsGate}}

	// Start follows the plans, resizing the gate, until its context ends;
	// then it closes the gate, waits for the calls in flight and hands the
	// pod's share back to the operator before it returns.
	follow, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan error, 1)
	go func() { started <- rt.Start(follow) }()

	// The pod's work; a server would serve requests here.
	for _, path := range []string{"/quote", "/busy", "/quote"} {
		fmt.Println(callLogistics(ctx, client, logisticsURL+path))
	}

	// Stop taking work first (http.Server.Shutdown), then stop following.
	stop()
	if err := <-started; err != nil {
		return fmt.Errorf("hand the share back: %w", err)
	}
	fmt.Println("stopped, share handed back")
	return nil
}

// callLogistics makes one call and tells a local rejection from a remote
// failure.
func callLogistics(ctx context.Context, client *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := client.Do(req)
	var rej *gate.Rejection
	if errors.As(err, &rej) {
		// This pod's share is used up and the call was never sent.
		return fmt.Sprintf("shed locally (%s): answer from a fallback, never retry", rej.Reason)
	}
	if err != nil {
		return "remote failure: " + err.Error() // connection refused, timeout, ...
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= http.StatusInternalServerError {
		return "remote failure: " + resp.Status // the downstream's own answer
	}
	return "ok: " + resp.Status
}

// README:end

// A gate the service needs but the source does not hold is an error of New:
// the pod fails at start instead of shedding everything.
func ExampleNew_missingGate() {
	dir := examplePlans(5, 0)
	defer func() { _ = os.RemoveAll(dir) }()

	_, err := backpressure.New(context.Background(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"payments"},
	})
	fmt.Println(errors.Is(err, backpressure.ErrNoPlan))
	fmt.Println(err)
	// Output:
	// true
	// backpressure: no valid plan document for gate "payments"; the source holds plans for ["logistics-api"]
}

// Every lookup of a name the Runtime has no gate for fails: there is no nil
// gate to hand to a middleware by mistake.
func ExampleRuntime_Gate() {
	dir := examplePlans(5, 0)
	defer func() { _ = os.RemoveAll(dir) }()
	rt, err := backpressure.New(context.Background(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"logistics-api"},
	})
	if err != nil {
		log.Fatal(err)
	}

	_, err = rt.Gate("logistic-api")
	fmt.Println(errors.Is(err, backpressure.ErrNoPlan))
	fmt.Println(err)
	// Output:
	// true
	// backpressure: no valid plan document for gate "logistic-api"; the Runtime has gates ["logistics-api"]
}

// Start on a conservative share of the application's own when no published
// plan is there yet, here an empty mounted volume, and take the published
// plan as soon as it appears.
func ExampleNew_bootstrap() {
	dir, err := os.MkdirTemp("", "plans") // the volume, mounted optional: true
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()

	rt, err := backpressure.New(context.Background(), backpressure.FromDir(dir), backpressure.Options{
		Gates: []string{"logistics-api"},
		// The contract (40 in flight, 100/s) divided by the HPA's
		// maxReplicas (10); kubectl backpressure plan prints it.
		Bootstrap: []backpressure.Share{{
			Gate: "logistics-api",
			Limits: gate.Limits{Permits: 4, RatePerSecond: 10, Burst: 10, QueueCapacity: 4,
				MaxQueueWait: 500 * time.Millisecond, AcquireTimeout: time.Second, TypicalLatency: 50 * time.Millisecond},
			Workers: 4, RetryBudgetPerSecond: 1,
		}},
		BootstrapWait: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	p, err := rt.Share("logistics-api")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("permits %d, epoch %q\n", p.Limits.Permits, p.Epoch)
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
		log.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	rt, err := backpressure.New(ctx, backpressure.FromConfigMap(client, os.Getenv("POD_NAMESPACE"), "search-gateway-backpressure"),
		backpressure.Options{Gates: []string{"logistics-api"}, Ack: &backpressure.AckOptions{}})
	if err != nil {
		log.Fatal(err)
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
	dir := examplePlans(0, 0) // a share too small for one call: every call is shed
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	rt, err := backpressure.New(ctx, backpressure.FromDir(dir), backpressure.Options{Gates: []string{"logistics-api"}})
	if err != nil {
		log.Fatal(err)
	}
	g, err := rt.Gate("logistics-api")
	if err != nil {
		log.Fatal(err)
	}
	budget, err := rt.Budget("logistics-api")
	if err != nil {
		log.Fatal(err)
	}

	attempts := 0
	policy := retry.Policy{
		MaxRetries: 2,
		Budget:     budget,
		Retryable:  func(err error) bool { return errors.Is(err, errUnavailable) },
	}
	err = retry.Do(ctx, policy, func(ctx context.Context) error {
		attempts++
		return g.Do(ctx, func(ctx context.Context) error {
			return errUnavailable // a 503 from the downstream, say
		})
	})
	fmt.Println("attempts:", attempts, "shed:", errors.Is(err, gate.ErrRejected))
	// Output:
	// attempts: 1 shed: true
}

var errUnavailable = errors.New(http.StatusText(http.StatusServiceUnavailable))
