//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// ContractName is the DownstreamContract of the two-callers scenario.
const ContractName = "logistics-api"

// CallerSpec is one workload of the two-callers scenario: a Deployment and
// its HPA in a namespace of its own, and a DownstreamQuota that names the
// shared contract.
type CallerSpec struct {
	// Name is the Deployment's (and HPA's) name; the quota, and so the gate,
	// is QuotaName in every caller's namespace.
	Name      string
	Namespace string
	// Weight and DemandInFlight are the quota's spec.weight and
	// spec.demand.inFlight (0: no demand stated, unbounded).
	Weight         int32
	DemandInFlight int32
	// Part is the permits the caller must get once every caller has Ready
	// pods, worked out by hand from the weights, the demands and the
	// contract (see TwoCallers): the figure the operator's split is checked
	// against.
	Part int64
	// RequestsPerSecond is the open-loop load over the caller's Ready pods.
	RequestsPerSecond float64
	// InitialReplicas run before the load starts; Scale are the caller's
	// autoscaler's steps.
	InitialReplicas int32
	Scale           []schedule.ScaleStep
}

// CallersScenario is several workloads calling one downstream whose
// contract they share through one DownstreamContract, each scaling on its
// own schedule.
type CallersScenario struct {
	Duration      time.Duration
	PodStartDelay time.Duration
	Callers       []CallerSpec
	// Checkpoints are the moments at which each caller's Ready pods must
	// hold its part.
	Checkpoints []report.CallersCheckpoint
}

// replicasAt returns the replicas the caller's autoscaler has been asked
// for at t.
func (c CallerSpec) replicasAt(t time.Duration) int32 {
	return schedule.Schedule{InitialReplicas: c.InitialReplicas, Scale: c.Scale}.ReplicasAt(t)
}

// TwoCallers is the two-callers scenario, 33 seconds at the typical latency:
// the search gateway (weight 1, no demand stated, 1,200 requests/s) scales
// 4 → 8 at 8 s and 8 → 3 at 22 s; the checkout gateway (weight 3, demand 24
// in flight, 600 requests/s) scales 2 → 6 at 14 s.
//
// Their parts, by weighted max-min fairness, worked out by hand: the usable
// permits are floor(50 × 80 / 100) = 40; by weight alone search would get
// 40 × 1/4 = 10 and checkout 40 × 3/4 = 30, but checkout states a demand of
// 24 < 30, so it gets 24 and the 40 − 24 = 16 left go to search, which
// states none. Search 16, checkout 24.
//
// The scenario asks the HPAs for those steps; each acts within its sync
// period (2 s). The first three checkpoints leave every step 5 s or more
// from its HPA's decision to settle, and come before the next step can
// change a caller's Ready pods: the one at 15 s follows checkout's step at
// 14 s, but no new pod is Ready sooner than the pod start delay (1.5 s)
// after the HPA acts. The last one follows search's scale-down 8 → 3, whose
// end depends on the departing pods draining their calls and exiting, which
// a loaded machine slows: it polls from 24 s (the HPA has decided by then)
// for search's 3 Ready pods holding its 16 permits, and fails when that has
// not happened by 32 s, 10 s after the step was asked for.
func TwoCallers() CallersScenario {
	return CallersScenario{
		Duration:      33 * time.Second,
		PodStartDelay: 1500 * time.Millisecond,
		Callers: []CallerSpec{
			{Name: "search-gateway", Namespace: "storm-callers-search", Weight: 1, Part: 16, RequestsPerSecond: 1200, InitialReplicas: 4,
				Scale: []schedule.ScaleStep{{At: 8 * time.Second, Replicas: 8}, {At: 22 * time.Second, Replicas: 3}}},
			{Name: "checkout-gateway", Namespace: "storm-callers-checkout", Weight: 3, DemandInFlight: 24, Part: 24, RequestsPerSecond: 600, InitialReplicas: 2,
				Scale: []schedule.ScaleStep{{At: 14 * time.Second, Replicas: 6}}},
		},
		Checkpoints: []report.CallersCheckpoint{
			{At: 7500 * time.Millisecond}, {At: 15 * time.Second}, {At: 21500 * time.Millisecond},
			{At: 22*time.Second + cluster.HPASyncPeriod, Within: 8 * time.Second},
		},
	}
}

// Validate reports a scenario the harness cannot run.
func (cs CallersScenario) Validate() error {
	var errs []error
	if cs.Duration <= 0 {
		errs = append(errs, errors.New("duration must be positive"))
	}
	if len(cs.Callers) < 2 {
		errs = append(errs, errors.New("at least two callers"))
	}
	var parts int64
	for _, c := range cs.Callers {
		parts += c.Part
		s := schedule.Schedule{Duration: cs.Duration, RequestsPerSecond: c.RequestsPerSecond, InitialReplicas: c.InitialReplicas,
			Latency: []schedule.LatencyStep{{Latency: TypicalLatency}}, Scale: c.Scale}
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
		}
		if c.Weight < 1 || c.DemandInFlight < 0 {
			errs = append(errs, fmt.Errorf("caller %s: weight %d must be at least 1, demand %d at least 0", c.Name, c.Weight, c.DemandInFlight))
		}
	}
	// Every usable permit goes to some caller: a part worked out wrong by
	// hand shows here rather than as a missed goal after a run.
	if parts != int64(Usable()) {
		errs = append(errs, fmt.Errorf("the callers' parts add up to %d, not the %d usable permits", parts, Usable()))
	}
	for _, cp := range cs.Checkpoints {
		if cp.At <= 0 || cp.Within < 0 || cp.End() >= cs.Duration {
			errs = append(errs, fmt.Errorf("checkpoint at %v within %v outside the run", cp.At, cp.Within))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("storm: invalid callers scenario: %w", errors.Join(errs...))
	}
	return nil
}

// data returns the scenario's data for its report, yet without what a run
// records.
func (cs CallersScenario) data() *report.CallersData {
	d := &report.CallersData{Downstream: theDownstream, Duration: cs.Duration, Checkpoints: cs.Checkpoints}
	for _, c := range cs.Callers {
		d.Callers = append(d.Callers, report.Caller{Name: c.Name, Namespace: c.Namespace, Quota: QuotaName, Weight: c.Weight,
			DemandInFlight: c.DemandInFlight, Part: c.Part, InitialReplicas: c.InitialReplicas, Scale: c.Scale})
	}
	return d
}

// ContractObject returns the scenario's DownstreamContract: the quota's
// contract, shared.
func ContractObject() (*v1alpha1.DownstreamContract, error) {
	q, err := Quota()
	if err != nil {
		return nil, err
	}
	return &v1alpha1.DownstreamContract{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DownstreamContract"},
		ObjectMeta: metav1.ObjectMeta{Name: ContractName},
		Spec: v1alpha1.DownstreamContractSpec{
			Downstream:           q.Spec.Downstream,
			Contract:             *q.Spec.Contract,
			SafetyPercent:        q.Spec.SafetyPercent,
			RetryBudgetPerSecond: q.Spec.Retry.BudgetPerSecond,
		},
	}, nil
}

// CallerObjects returns a caller's Deployment, HPA and DownstreamQuota,
// made from the scenario's manifests.
func CallerObjects(c CallerSpec) ([]client.Object, error) {
	var dep appsv1.Deployment
	var hpa autoscalingv2.HorizontalPodAutoscaler
	for name, obj := range map[string]any{"deployment.yaml": &dep, "hpa.yaml": &hpa} {
		b, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			return nil, fmt.Errorf("storm: %s: %w", name, err)
		}
	}
	labels := map[string]string{"app.kubernetes.io/name": c.Name}
	dep.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	dep.Name, dep.Namespace, dep.Labels = c.Name, c.Namespace, labels
	dep.Spec.Replicas = &c.InitialReplicas
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	dep.Spec.Template.Labels = labels
	hpa.TypeMeta = metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"}
	hpa.Name, hpa.Namespace = c.Name, c.Namespace
	hpa.Spec.ScaleTargetRef.Name = c.Name
	cluster.DictateHPA(&hpa)

	q, err := Quota()
	if err != nil {
		return nil, err
	}
	q.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DownstreamQuota"}
	q.Namespace = c.Namespace
	q.Spec.WorkloadRef.Name, q.Spec.HPAName = c.Name, c.Name
	q.Spec.Contract, q.Spec.SafetyPercent = nil, 0
	q.Spec.ContractRef = &v1alpha1.ContractReference{Name: ContractName}
	q.Spec.Weight = c.Weight
	q.Spec.Demand = nil
	if c.DemandInFlight > 0 {
		q.Spec.Demand = &v1alpha1.Demand{InFlight: ptrTo(c.DemandInFlight)}
	}
	return []client.Object{&dep, &hpa, q}, nil
}

func ptrTo[T any](v T) *T { return &v }

// callerRun is one caller's state while the scenario runs.
type callerRun struct {
	spec      CallerSpec
	obs       *observe.Observations
	endpoints *traffic.Endpoints
	w         *cluster.Workload
	load      *traffic.LoadResult
}

// RunCallers runs the scenario: the contract, each caller's objects and
// pods, one downstream for all, each caller's load and autoscaler, and the
// sampling of all of it. An error means the harness could not run it.
func (h *Harness) RunCallers(ctx context.Context, cs CallersScenario) (rep *report.CallersReport, err error) {
	if err := cs.Validate(); err != nil {
		return nil, err
	}
	logDir := filepath.Join(h.OutDir, "logs", "two-callers")
	manifestDir := filepath.Join(h.OutDir, "manifests", "two-callers")
	if err := os.RemoveAll(logDir); err != nil {
		return nil, err
	}
	for _, d := range []string{logDir, manifestDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := h.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/downstreamcontracts.backpressure.dev"); err != nil {
		return nil, err
	}
	dc, err := ContractObject()
	if err != nil {
		return nil, err
	}
	objs := []client.Object{dc}
	for _, c := range cs.Callers {
		if err := h.Kubectl("create", "namespace", c.Namespace); err != nil {
			return nil, err
		}
		more, err := CallerObjects(c)
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	h.logf("[two-callers] Applying the DownstreamContract and, per caller, a Deployment, its HPA and a DownstreamQuota naming the contract")
	for i, obj := range objs {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(manifestDir, fmt.Sprintf("%02d-%s-%s.yaml", i, obj.GetNamespace(), obj.GetName()))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return nil, err
		}
		if err := h.Kubectl("apply", "-f", path); err != nil {
			return nil, err
		}
	}
	defer func() {
		// The contract outlives the namespaces otherwise.
		err = errors.Join(err, h.Kubectl("delete", "downstreamcontract", ContractName, "--wait=false"))
	}()

	ds, err := traffic.StartDownstream(Contract, TypicalLatency)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ds.Close() }()

	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	contractObs := &observe.Contract{}
	go contractObs.Watch(watchCtx, h.Client, ContractName)

	runs := make([]*callerRun, len(cs.Callers))
	for i, c := range cs.Callers {
		cr := &callerRun{spec: c, obs: &observe.Observations{}, endpoints: &traffic.Endpoints{Timeout: RequestTimeout}}
		defer cr.endpoints.Close()
		runs[i] = cr
		cm := c.Name + v1alpha1.ConfigMapSuffix
		go cr.obs.WatchConfigMap(watchCtx, h.Client, c.Namespace, cm, QuotaName)
		go cr.obs.WatchQuota(watchCtx, h.Client, c.Namespace, QuotaName)
		go cr.obs.WatchPods(watchCtx, h.Client, c.Namespace, QuotaName)
		if err := cluster.WaitFor(ctx, setupTimeout, "the operator publishing "+c.Name+"'s plan", func() (bool, error) {
			return len(cr.obs.Published()) > 0, h.ManagerErr()
		}); err != nil {
			return nil, err
		}
		run := func(pod *corev1.Pod, onLog func(cluster.LogLine)) (*cluster.Process, error) {
			args := []string{"--listen", "127.0.0.1:0", "--downstream", ds.URL(), "--gate", QuotaName,
				"--configmap", cm, "--namespace", c.Namespace, "--kubeconfig", h.Kubeconfig, "--acknowledge",
				"--metrics-listen", "127.0.0.1:0"}
			args = append(args, GatewayRetryArgs...)
			proc, err := h.StartProcess(cluster.ProcessSpec{
				Name:    c.Namespace + "/" + pod.Name,
				Path:    h.gateway,
				Args:    args,
				Env:     []string{"POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace},
				LogPath: podLogPath(logDir, pod),
				OnLog: func(l cluster.LogLine) {
					switch l.Msg {
					case cluster.MsgAppliedPlan:
						cr.obs.Applied(pod.Name, l)
					case cluster.MsgServingMetrics:
						cr.obs.ServingMetrics(pod.Name, l.Address)
					}
					onLog(l)
				},
			})
			if err != nil {
				return nil, err
			}
			go func() {
				<-proc.Done()
				cr.obs.Exited(pod.Name)
			}()
			return proc, nil
		}
		w, err := cluster.NewWorkload(ctx, cluster.WorkloadOptions{
			Client: h.Client, Config: h.Config, Metrics: h.Metrics, Namespace: c.Namespace, Name: c.Name, HPA: c.Name,
			Run: run, Endpoints: cr.endpoints, StartDelay: cs.PodStartDelay, PreStop: preStop,
		})
		if err != nil {
			return nil, err
		}
		cr.w = w
		defer func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
			defer cancel()
			err = errors.Join(err, w.Close(tctx))
		}()
		h.logf("[two-callers] Starting %d pods of %s in %s", c.InitialReplicas, c.Name, c.Namespace)
		if err := w.Start(ctx, c.InitialReplicas); err != nil {
			return nil, err
		}
	}
	for _, cr := range runs {
		if err := cr.w.WaitReady(ctx, int(cr.spec.InitialReplicas), setupTimeout); err != nil {
			return nil, err
		}
	}
	// Start from a settled handover: every caller's pods acknowledged its
	// last plan and hold its part.
	if err := cluster.WaitFor(ctx, setupTimeout, "every caller's pods acknowledging their plan and holding its part", func() (bool, error) {
		for _, cr := range runs {
			held, _ := cr.obs.PermitsOf(cr.w.Ready(), "")
			if !cr.obs.RolledOut(cr.w.Running()) || int64(held) != cr.spec.Part {
				return false, h.ManagerErr()
			}
		}
		return true, h.ManagerErr()
	}); err != nil {
		return nil, err
	}

	h.logf("[two-callers] Running the scenario: %v", cs.Duration)
	start := time.Now().Add(50 * time.Millisecond)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan struct{})
	remaining := len(runs)
	doneOne := make(chan struct{}, len(runs))
	for _, cr := range runs {
		l := &traffic.Load{Rate: cr.spec.RequestsPerSecond, Endpoints: cr.endpoints, MaxOutstanding: MaxOutstanding}
		go func() {
			cr.load = l.Run(loadCtx, start, cs.Duration)
			doneOne <- struct{}{}
		}()
	}
	go func() {
		for range remaining {
			<-doneOne
		}
		close(loadDone)
	}()

	samples := make(chan []report.CallersSample, 1)
	stopSampling := make(chan struct{})
	go func() {
		var out []report.CallersSample
		for i := 0; ; i++ {
			off := time.Duration(i) * report.SampleInterval
			select {
			case <-stopSampling:
				samples <- out
				return
			case <-time.After(time.Until(start.Add(off))):
			}
			sm := report.CallersSample{At: off, Downstream: ds.Sample()}
			for _, cr := range runs {
				ready := cr.w.Ready()
				rp, _ := cr.obs.PermitsOf(ready, "")
				sm.Callers = append(sm.Callers, report.CallerSample{Pods: cr.w.Counts(), ReadyPermits: rp, Permits: cr.obs.TotalPermits()})
			}
			sm.Parts = contractObs.Parts()
			out = append(out, sm)
			if off >= cs.Duration {
				<-stopSampling
				samples <- out
				return
			}
		}
	}()

	type event struct {
		at     time.Duration
		caller *callerRun
		to     int32
	}
	var events []event
	for _, cr := range runs {
		for _, st := range cr.spec.Scale {
			events = append(events, event{st.At, cr, st.Replicas})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	var runErr error
	for _, ev := range events {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(ev.at))):
		}
		if ctx.Err() != nil {
			break
		}
		h.logf("[two-callers] %5.1fs the scenario asks the HPA of %s for %d replicas (it has %d)", time.Since(start).Seconds(), ev.caller.spec.Name, ev.to, ev.caller.w.Counts().Desired)
		if err := ev.caller.w.Scale(ctx, ev.to); err != nil {
			runErr = err
			stopLoad()
			break
		}
	}
	<-loadDone
	close(stopSampling)
	data := cs.data()
	data.Samples, data.Final = <-samples, ds.Sample()
	for _, cr := range runs {
		data.Loads = append(data.Loads, cr.load)
	}
	if err := errors.Join(runErr, ctx.Err()); err != nil {
		return nil, err
	}
	// Let the last handover finish before reading the acknowledgements.
	_ = cluster.WaitFor(ctx, 10*time.Second, "the rollout of every caller's last plan", func() (bool, error) {
		for _, cr := range runs {
			if !cr.obs.RolledOut(cr.w.Running()) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, cr := range runs {
		data.Rollouts = append(data.Rollouts, rolloutOf(cr.obs, cr.w.Running()))
		data.PermitsChecks = append(data.PermitsChecks, cr.obs.CheckPermits(ctx, QuotaName, cr.w.Running()))
		if err := cr.w.Err(); err != nil {
			return nil, err
		}
	}
	data.Status = contractObs.Last()
	if err := errors.Join(h.ManagerErr(), h.ControllersErr()); err != nil {
		return nil, err
	}
	return analyzeCallers(data), nil
}

// analyzeCallers turns the scenario's data into its report and judges its
// goals.
func analyzeCallers(d *report.CallersData) *report.CallersReport {
	r := report.AnalyzeCallers(d)
	r.Goals = callersGoals(r)
	return r
}

// rolloutOf returns the rollout report of a caller's observations, with
// running naming its pods alive now.
func rolloutOf(obs *observe.Observations, running []string) *report.RolloutReport {
	return report.Rollout(obs.Published(), obs.Rollout(), running, obs.LastAcks())
}

// callersGoals are the goals of the two-callers scenario: the shared
// contract kept, and each caller given its part, in the contract's status
// and in its Ready pods' gates at every checkpoint, acknowledged.
func callersGoals(r *report.CallersReport) report.Goals {
	const name = "two-callers"
	var gs report.Goals
	add := func(goal, want, got string, met, asserted bool) { gs.Add(name, goal, want, got, met, asserted) }
	add("peak in-flight at the shared downstream within the contract", fmt.Sprintf("≤ %d", r.Contract),
		fmt.Sprint(r.PeakInFlight), r.PeakInFlight <= int64(r.Contract), true)
	add("downstream 429s", "0", fmt.Sprint(r.Downstream429), r.Downstream429 == 0, true)
	for _, c := range r.Callers {
		add(c.Name+"'s part in the contract's status", fmt.Sprintf("%d (its weighted max-min part)", c.FairPart),
			fmt.Sprint(c.StatusPart), int64(c.StatusPart) == c.FairPart, true)
		var got []string
		met := len(c.Checkpoints) > 0
		for _, cp := range c.Checkpoints {
			got = append(got, cp.String())
			met = met && cp.Met(c.FairPart)
		}
		add(c.Name+"'s Ready pods hold its fair part at every checkpoint", fmt.Sprintf("%d", c.FairPart), strings.Join(got, "; "), met, true)
		if ro := c.Rollout; ro != nil {
			add(c.Name+"'s running pods acknowledged its last plan", "acknowledged = total, 0 stale pods, at "+ro.Last,
				fmt.Sprintf("%d/%d acknowledged, %d stale, status current: %t", ro.Acknowledged, ro.Total, ro.StalePods, ro.Current),
				ro.Current && ro.Acknowledged == ro.Total && ro.StalePods == 0, true)
		}
		if pc := c.PermitsCheck; pc != nil {
			got := fmt.Sprintf("%d of %d pods agree", pc.Agree, pc.Pods)
			if len(pc.Disagreements) > 0 {
				got += ": " + strings.Join(pc.Disagreements, "; ")
			}
			add(c.Name+"'s pods' backpressure_gate_permits metric equals their logged permits", "every running pod", got,
				pc.Pods > 0 && pc.Agree == pc.Pods, true)
		}
		add(c.Name+": the harness kept up with the load", fmt.Sprintf("≥ %.0f%% of %.0f/s", 100*report.LoadGoalFraction, c.LoadTargetPerSecond),
			fmt.Sprintf("%.0f/s", c.LoadAchievedPerSecond), c.LoadAchievedPerSecond >= report.LoadGoalFraction*c.LoadTargetPerSecond, false)
	}
	return gs
}
