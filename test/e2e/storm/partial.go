//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// The partial-load scenario: the sample quota's 40 usable permits at an
// ordinary load, below what they serve, over 8 pods, 6 of them pooled in a
// reserve that a permit server lends per call. The pods borrow by both of
// the library's lending rules (gate.LendRules): a loan goes back as soon
// as the pod has a permit of its own for its call, and a call with a place
// in its waiting room asks only after PartialAskAfter. And they offer
// their idle permits to the permit server (--reserve-offer), which lends
// them to other pods' calls when the reserve is lent out. The reserve's
// size and the wait are the model's (internal/lossmodel): with offers, a
// reserve of 6 admits about 0.994 of the global gate for both balancers
// with about 0.44 of the admitted calls borrowed, a margin under half; a
// larger one borrows more for little more, a smaller one admits less.
const (
	// PartialPods are the calling workload's pods.
	PartialPods = 8
	// PartialReserve is the quota's spec.reserve.permits.
	PartialReserve = 6
	// PartialAskAfter is the pods' --reserve-ask-after
	// (gate.LendRules.AskAfter); they return loans early too
	// (--reserve-return-early).
	PartialAskAfter = 10 * time.Millisecond
	// PartialDemandWindow is the window of the pods' demand that the
	// custom metrics API serves the operator: its read interval
	// (controller.DefaultDemandInterval), so that each reading covers the
	// calls since the one before, as a Prometheus adapter's rate over the
	// scrape interval would, rather than the last few seconds of them.
	// With a window of 5 s a pinned pod's share followed the noise of one
	// short reading.
	PartialDemandWindow = 15 * time.Second
	// PartialLoad is the offered load, a fraction of what the usable
	// permits serve at the mean latency: calls arrive at
	// PartialLoad × Usable / PartialLatency per second.
	PartialLoad = 0.8
	// PartialLatency and PartialLatencyCV are the mean and the coefficient
	// of variation of the calls' lognormal latency.
	PartialLatency   = 220 * time.Millisecond
	PartialLatencyCV = 0.5
	// PartialMaxQueueWait is the sample quota's waiting room.
	PartialMaxQueueWait = 40 * time.Millisecond
	// PartialSkew is σ of the pinned connections' lognormal weights.
	PartialSkew = 0.8
	// PartialSeed chooses the arrivals, the latencies, the balancer's
	// choices and the pinned weights (lossmodel.Weights), here and in the
	// model's prediction.
	PartialSeed = 1
	// PartialWarmup is the start of the load left out of every figure: the
	// permit server waits out its leases (PartialMaxLease), the pods'
	// gates fill, and the division follows the demand the load brings,
	// which the operator reads every 15 seconds.
	PartialWarmup = 30 * time.Second
	// PartialDuration is the whole load, the warm-up included.
	PartialDuration = 120 * time.Second
	// PartialMaxLease is the permit server's --max-lease: above the quota's
	// deadline (PartialDeadline) and the lease margin. A started server
	// lends nothing for this long.
	PartialMaxLease = 3 * time.Second
	// PartialDeadline is the quota's deadline: far above the calls'
	// latency, so that no call is cut short.
	PartialDeadline = 2 * time.Second
	// BrokerName is the permit server's Deployment.
	BrokerName = WorkloadName + "-broker"
)

// Balancers of the partial-load scenario, as the model names them.
const (
	PartialRandom = string(lossmodel.Random)
	PartialPinned = string(lossmodel.Pinned)
)

// PartialQuotaSpec is the partial-load scenario's quota: the sample's
// contract, latency and waiting room, a deadline no call reaches, no rate
// limit, a reserve of PartialReserve lent by BrokerName, and the rest
// divided by the pods' demand (read from the storm's custom metrics API).
func PartialQuotaSpec() v1alpha1.DownstreamQuotaSpec {
	return v1alpha1.DownstreamQuotaSpec{
		WorkloadRef: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: "Deployment", Name: WorkloadName},
		Downstream:  "logistics.example.com",
		Contract:    &v1alpha1.Contract{Concurrency: Contract},
		Latency: v1alpha1.Latency{
			Typical: metav1.Duration{Duration: PartialLatency},
			Worst:   &metav1.Duration{Duration: 1800 * time.Millisecond},
		},
		Deadline:       metav1.Duration{Duration: PartialDeadline},
		MaxQueueWait:   &metav1.Duration{Duration: PartialMaxQueueWait},
		AcquireTimeout: &metav1.Duration{Duration: PartialMaxQueueWait},
		SafetyPercent:  80,
		Reserve: &v1alpha1.Reserve{
			Permits:   intstr.FromInt32(PartialReserve),
			BrokerRef: v1alpha1.BrokerReference{Name: BrokerName},
		},
		Shares: &v1alpha1.Shares{Policy: v1alpha1.SharesDemand},
	}
}

// partialObjects are the scenario's objects in namespace: the quota of spec and the
// permit server's Deployment (one replica).
func partialObjects(namespace string, spec v1alpha1.DownstreamQuotaSpec) (*v1alpha1.DownstreamQuota, *appsv1.Deployment) {
	q := &v1alpha1.DownstreamQuota{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DownstreamQuota"},
		ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: namespace},
		Spec:       spec,
	}
	labels := map[string]string{"app.kubernetes.io/name": BrokerName}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: BrokerName, Namespace: namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "broker", Image: "backpressure-broker:latest",
				}}},
			},
		},
	}
	return q, d
}

// partialStage is one run of the partial-load scenario while it runs.
type partialStage struct {
	h          *Harness
	name       string
	namespace  string
	balancer   string
	downstream *traffic.Downstream
	obs        *observe.Observations
	gateways   *cluster.Workload
	broker     *cluster.Workload
	// brokerAddr is the permit server's gRPC address, fixed before it
	// starts, as a Service's would be.
	brokerAddr string
	// pods is how many pods of the workload run; service receives the
	// Ready ones' addresses (endpoints, the partial load's own balancer,
	// or a traffic.Endpoints).
	pods      int
	service   cluster.Endpoints
	endpoints *podEndpoints
	// silent pods do not acknowledge their plans (no --acknowledge).
	silent bool
	logDir string
	// spec is the quota's; duration and warmup the load's.
	spec             v1alpha1.DownstreamQuotaSpec
	duration, warmup time.Duration
	// killAt, when positive, is when the permit server's replica gets
	// SIGKILL (the Deployment then starts another).
	killAt time.Duration
	// brokers are the permit server's processes, in the order they
	// started.
	brokersMu    sync.Mutex
	brokers      []*cluster.Process
	brokerStarts []time.Time
	// brokerMetrics is the /metrics address of the replica that logged
	// it last.
	brokerMetrics string
	// loadStart is when the load started; kill watches the permit server
	// killed, when killAt is set.
	loadStart time.Time
	kill      *brokerKill
}

// RunPartialLoad runs the partial-load scenario with the balancer
// (PartialRandom or PartialPinned) in a namespace of its own and returns
// its figures. An error means the harness could not run it, not that a
// goal was missed.
func (h *Harness) RunPartialLoad(ctx context.Context, balancer string) (rep *PartialLoadRun, err error) {
	if balancer != PartialRandom && balancer != PartialPinned {
		return nil, fmt.Errorf("storm: partial load: balancer %q: must be %s or %s", balancer, PartialRandom, PartialPinned)
	}
	st := newPartialStage(h, "partial-"+balancer, balancer, PartialQuotaSpec())
	st.duration, st.warmup = PartialDuration, PartialWarmup
	err = h.runPartial(ctx, st, func(ctx context.Context) (err error) {
		h.logf("[%s] Running the load: %v, the first %v a warm-up", st.name, st.duration, st.warmup)
		rep, err = st.run(ctx)
		return err
	})
	return rep, err
}

// newPartialStage returns a stage named name, in namespace storm-<name>,
// of PartialPods pods that acknowledge their plans, calls sent by the
// partial load's balancer, and the quota of spec.
func newPartialStage(h *Harness, name, balancer string, spec v1alpha1.DownstreamQuotaSpec) *partialStage {
	eps := newPodEndpoints()
	return &partialStage{h: h, name: name, namespace: "storm-" + name, balancer: balancer,
		obs: &observe.Observations{}, pods: PartialPods, service: eps, endpoints: eps, spec: spec}
}

// reserve is the permits of the stage's quota pooled in its reserve; 0
// without one (no permit server runs then).
func (st *partialStage) reserve() int {
	if st.spec.Reserve == nil {
		return 0
	}
	return st.spec.Reserve.Permits.IntValue()
}

// runPartial plays a stage of the partial load or another scenario on its
// phases: set up, the first plan, the permit server (when the quota has a
// reserve) and the pods, the settled division, then play; and tears
// everything down, also on error.
func (h *Harness) runPartial(ctx context.Context, st *partialStage, play func(context.Context) error) (err error) {
	var teardown []func() error
	defer func() {
		for i := len(teardown) - 1; i >= 0; i-- {
			err = errors.Join(err, teardown[i]())
		}
	}()
	if err := st.setUp(&teardown); err != nil {
		return err
	}
	watchCtx, stopWatches := context.WithCancel(ctx)
	teardown = append(teardown, func() error { stopWatches(); return nil })
	go st.obs.WatchConfigMap(watchCtx, h.Client, st.namespace, ConfigMapName, QuotaName)
	go st.obs.WatchQuota(watchCtx, h.Client, st.namespace, QuotaName)
	go st.obs.WatchPods(watchCtx, h.Client, st.namespace, QuotaName)
	if err := cluster.WaitFor(ctx, setupTimeout, "the operator publishing the partial-load plan", func() (bool, error) {
		return len(st.obs.Published()) > 0, h.ManagerErr()
	}); err != nil {
		return err
	}
	if err := st.startPods(ctx, &teardown); err != nil {
		return err
	}
	if err := st.settle(ctx); err != nil {
		return err
	}
	return play(ctx)
}

// setUp writes and applies the workload's Deployment (st.pods replicas),
// the quota and, with a reserve, the permit server's Deployment, and
// starts the downstream.
func (st *partialStage) setUp(teardown *[]func() error) error {
	h := st.h
	st.logDir = filepath.Join(h.OutDir, "logs", st.name)
	if err := os.RemoveAll(st.logDir); err != nil {
		return err
	}
	if err := os.MkdirAll(st.logDir, 0o755); err != nil {
		return err
	}
	dir := filepath.Join(h.OutDir, "manifests", st.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	q, broker := partialObjects(st.namespace, st.spec)
	var dep appsv1.Deployment
	b, err := manifests.ReadFile("manifests/" + WorkloadManifests[0])
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, &dep); err != nil {
		return fmt.Errorf("storm: %s: %w", WorkloadManifests[0], err)
	}
	dep.Spec.Replicas = ptr.To(int32(st.pods))
	// The Deployment first, then the permit server, then the quota.
	objects := []struct {
		file string
		obj  any
	}{{"deployment.yaml", &dep}, {"broker.yaml", broker}, {"quota.yaml", q}}
	var files []string
	for _, o := range objects {
		if o.file == "broker.yaml" && st.reserve() == 0 {
			continue
		}
		b, err := yaml.Marshal(o.obj)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, o.file)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		files = append(files, path)
	}
	h.logf("[%s] Applying the Deployment %s (%d pods), the quota with a reserve of %d and, with one, the permit server %s in namespace %s",
		st.name, WorkloadName, st.pods, st.reserve(), BrokerName, st.namespace)
	if err := h.Kubectl("create", "namespace", st.namespace); err != nil {
		return err
	}
	apply := []string{"apply", "--namespace", st.namespace}
	for _, f := range files {
		apply = append(apply, "-f", f)
	}
	if err := h.Kubectl(apply...); err != nil {
		return err
	}
	d, err := traffic.StartDownstream(Contract, PartialLatency)
	if err != nil {
		return err
	}
	st.downstream = d
	*teardown = append(*teardown, func() error { _ = d.Close(); return nil })
	return nil
}

// startPods starts the permit server's replica and, once it is Ready, the
// workload's pods, which borrow from it.
func (st *partialStage) startPods(ctx context.Context, teardown *[]func() error) error {
	h := st.h
	port, err := freePort()
	if err != nil {
		return err
	}
	st.brokerAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	start := func(name string, run cluster.PodRunner, eps cluster.Endpoints, n int32) (*cluster.Workload, error) {
		w, err := cluster.NewWorkload(ctx, cluster.WorkloadOptions{
			Client: h.Client, Config: h.Config, Namespace: st.namespace, Name: name, HPA: name,
			Run: run, Endpoints: eps, StartDelay: 500 * time.Millisecond, PreStop: preStop,
		})
		if err != nil {
			return nil, err
		}
		*teardown = append(*teardown, func() error {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
			defer cancel()
			return w.Close(tctx)
		})
		h.logf("[%s] Starting %d pods of %s", st.name, n, name)
		if err := w.Start(ctx, n); err != nil {
			return nil, err
		}
		return w, w.WaitReady(ctx, int(n), setupTimeout)
	}
	if st.reserve() > 0 {
		if st.broker, err = start(BrokerName, st.brokerRunner(), noEndpoints{}, 1); err != nil {
			return err
		}
	}
	// The custom metrics API serves the pods' demand, which the operator
	// divides by.
	stopMeasuring := h.Metrics.MeasurePods(st.namespace, QuotaName, PartialDemandWindow, st.obs.MetricsAddrs)
	*teardown = append(*teardown, func() error { stopMeasuring(); return nil })
	st.gateways, err = start(WorkloadName, st.gatewayRunner(), st.service, int32(st.pods))
	return err
}

// settle waits until the last plan gives the workload's running pods and,
// with a reserve, the permit server's replica the usable permits, the
// reserve's part to the replica, and every one of them put it in force:
// acknowledged it, or, for pods that do not acknowledge, applied the
// share it gives them.
func (st *partialStage) settle(ctx context.Context) error {
	return cluster.WaitFor(ctx, setupTimeout, "the pods and the permit server enforcing the division", func() (bool, error) {
		return st.settled(), st.h.ManagerErr()
	})
}

// settled reports whether the last published plan divides the usable
// permits over the running pods and the permit server's replica, and they
// all enforce it.
func (st *partialStage) settled() bool {
	pods := st.gateways.Running()
	var brokers []string
	if st.broker != nil {
		brokers = st.broker.Running()
	}
	pub := st.obs.Published()
	if len(pods) != st.pods || len(brokers) != min(st.reserve(), 1) || len(pub) == 0 {
		return false
	}
	last := pub[len(pub)-1]
	if !last.Divides(pods, Usable()-st.reserve()) || (len(brokers) == 1 && last.PermitsOf(brokers[0]) != st.reserve()) {
		return false
	}
	if !st.silent {
		return st.obs.RolledOut(append(pods, brokers...))
	}
	acks := st.obs.LastAcks()
	for _, b := range brokers {
		if acks[b] != last.Ack().String() {
			return false
		}
	}
	for _, pod := range pods {
		if n, _ := st.obs.PermitsOf([]string{pod}, ""); n != last.PermitsOf(pod) {
			return false
		}
	}
	return true
}

// brokerRunner runs the permit server's replica: backpressure-broker
// lending the slice of the reserve the quota's plan gives its pod, and
// acknowledging it, at brokerAddr.
func (st *partialStage) brokerRunner() cluster.PodRunner {
	return func(pod *corev1.Pod, onLog func(cluster.LogLine)) (*cluster.Process, error) {
		proc, err := st.h.StartProcess(cluster.ProcessSpec{
			Name: st.namespace + "/" + pod.Name,
			Path: st.h.broker,
			Args: []string{"--gate", QuotaName, "--configmap", ConfigMapName, "--namespace", st.namespace,
				"--kubeconfig", st.h.Kubeconfig, "--acknowledge", "--listen-address", st.brokerAddr,
				"--metrics-listen", "127.0.0.1:0", "--max-lease", PartialMaxLease.String()},
			Env:     []string{"POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace},
			LogPath: podLogPath(st.logDir, pod),
			OnLog: func(l cluster.LogLine) {
				if l.Msg == cluster.MsgServing && l.Metrics != "" {
					st.brokersMu.Lock()
					st.brokerMetrics = l.Metrics
					st.brokersMu.Unlock()
				}
				onLog(l)
			},
		})
		if err == nil {
			st.brokersMu.Lock()
			st.brokers = append(st.brokers, proc)
			st.brokerStarts = append(st.brokerStarts, time.Now())
			st.brokersMu.Unlock()
		}
		return proc, err
	}
}

// lastBroker returns the permit server's process started last.
func (st *partialStage) lastBroker() *cluster.Process {
	st.brokersMu.Lock()
	defer st.brokersMu.Unlock()
	if len(st.brokers) == 0 {
		return nil
	}
	return st.brokers[len(st.brokers)-1]
}

// gatewayRunner runs a pod of the workload: examples/gateway enforcing
// its share of the plan, acknowledging it unless the stage's pods are
// silent, and, when there is a reserve, borrowing from the permit server
// by both lending rules and offering it the pod's idle permits.
func (st *partialStage) gatewayRunner() cluster.PodRunner {
	return func(pod *corev1.Pod, onLog func(cluster.LogLine)) (*cluster.Process, error) {
		args := []string{"--listen", "127.0.0.1:0", "--downstream", st.downstream.URL(), "--gate", QuotaName,
			"--metrics-listen", "127.0.0.1:0", "--configmap", ConfigMapName, "--namespace", st.namespace,
			"--kubeconfig", st.h.Kubeconfig}
		if !st.silent {
			args = append(args, "--acknowledge")
		}
		if st.reserve() > 0 {
			args = append(args, "--reserve-address", st.brokerAddr, "--reserve-return-early", "--reserve-ask-after", PartialAskAfter.String(), "--reserve-offer")
		}
		return st.h.startObservedPod(st.obs, pod, st.h.gateway, args, st.logDir, onLog)
	}
}

// freePort returns a port free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// noEndpoints are the permit server's: the pods reach it at its fixed
// address, as through a Service, and no load is sent to it.
type noEndpoints struct{}

// Add ignores a Ready replica's address.
func (noEndpoints) Add(string) {}

// Remove ignores it too.
func (noEndpoints) Remove(string) {}
