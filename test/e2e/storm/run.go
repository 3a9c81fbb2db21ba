//go:build unix

package storm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Load settings of the harness.
const (
	// RequestTimeout bounds one request of the load.
	RequestTimeout = 10 * time.Second
	// MaxOutstanding bounds the load's requests in flight.
	MaxOutstanding = 4096
	// setupTimeout bounds the start of a variant's pods and plan.
	setupTimeout = 90 * time.Second
	// teardownTimeout bounds the graceful end of a variant's pods.
	teardownTimeout = 60 * time.Second
	// preStop is the pause between a pod leaving the endpoints and its
	// SIGTERM: requests picked for it just before are on their way.
	preStop = 200 * time.Millisecond
)

// Namespace returns the namespace a variant runs in.
func Namespace(v Variant) string { return "storm-" + v.Name }

// Run runs one variant of the scenario in a fresh namespace and returns
// its figures. An error means the harness could not run the scenario (a
// process that did not start, an API call that failed), not that a goal was
// missed.
func (h *Harness) Run(ctx context.Context, v Variant, s Schedule) (rep *VariantReport, err error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	ns := Namespace(v)
	logDir := filepath.Join(h.OutDir, "logs", v.Name)
	manifestDir := filepath.Join(h.OutDir, "manifests")
	// Logs of an earlier run would mix with this one's.
	if err := os.RemoveAll(logDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	if err := WriteManifests(manifestDir); err != nil {
		return nil, err
	}
	kind := cmp.Or(v.Kind, KindDeployment)
	// A schedule with scale steps of its own asks the HPA for them.
	files, err := VariantManifests(kind, len(s.Scale) > 0, v.Operator)
	if err != nil {
		return nil, err
	}

	h.logf("[%s] Applying the %s and HPA%s in namespace %s", v.Name, kind, map[bool]string{true: " and the DownstreamQuota"}[v.Operator], ns)
	if err := h.kubectl("create", "namespace", ns); err != nil {
		return nil, err
	}
	apply := []string{"apply", "--namespace", ns}
	for _, m := range files {
		apply = append(apply, "-f", filepath.Join(manifestDir, m))
	}
	if err := h.kubectl(apply...); err != nil {
		return nil, err
	}

	ds, err := StartDownstream(Contract, s.LatencyAt(0))
	if err != nil {
		return nil, err
	}
	defer func() { _ = ds.Close() }()

	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	obs := &Observations{}
	var planDir string
	if v.Operator {
		go obs.WatchConfigMap(watchCtx, h.Client, ns, ConfigMapName, QuotaName)
		go obs.WatchQuota(watchCtx, h.Client, ns, QuotaName)
		go obs.WatchPods(watchCtx, h.Client, ns, QuotaName)
		// The pods fail fast without a plan, as they should: wait for the
		// operator to publish one.
		if err := waitFor(ctx, setupTimeout, "the operator publishing a plan", func() (bool, error) {
			return len(obs.Published()) > 0, h.ManagerErr()
		}); err != nil {
			return nil, err
		}
	} else {
		planDir = filepath.Join(h.OutDir, "plans", v.Name)
		if err := WritePlanDir(planDir, *v.Plan); err != nil {
			return nil, err
		}
	}

	endpoints := &Endpoints{Timeout: RequestTimeout}
	defer endpoints.Close()
	// The laggard is the first pod started, when the variant has one; pods
	// start from their own goroutines.
	var lagMu sync.Mutex
	var laggardName string
	laggard := func() string {
		lagMu.Lock()
		defer lagMu.Unlock()
		return laggardName
	}
	run := func(pod *corev1.Pod, onLog func(LogLine)) (*Process, error) {
		args := []string{"--listen", "127.0.0.1:0", "--downstream", ds.URL(), "--gate", QuotaName}
		program := h.podProgram(v)
		lagMu.Lock()
		if v.Laggard > 0 && laggardName == "" {
			laggardName = pod.Name
			program = h.laggardPod
			args = append(args, "--apply-delay", v.Laggard.String())
			h.logf("[%s] Pod %s applies every new plan %v late", v.Name, pod.Name, v.Laggard)
		}
		lagMu.Unlock()
		// Every pod serves its metrics: the HPA scales on them.
		args = append(args, "--metrics-listen", "127.0.0.1:0")
		if v.Operator {
			args = append(args, "--configmap", ConfigMapName, "--namespace", ns,
				"--kubeconfig", h.Kubectl.Kubeconfig, "--acknowledge")
		} else {
			args = append(args, "--plan-dir", planDir)
		}
		args = append(args, GatewayRetryArgs...)
		proc, err := h.procs.Start(ProcessSpec{
			Name:    ns + "/" + pod.Name,
			Path:    program,
			Args:    args,
			Env:     []string{"POD_NAME=" + pod.Name, "POD_NAMESPACE=" + pod.Namespace},
			LogPath: podLogPath(logDir, pod),
			OnLog: func(l LogLine) {
				switch l.Msg {
				case MsgAppliedPlan:
					obs.Applied(pod.Name, l)
				case MsgServingMetrics:
					obs.ServingMetrics(pod.Name, l.Address)
				}
				onLog(l)
			},
		})
		if err != nil {
			return nil, err
		}
		go func() {
			<-proc.Done()
			obs.Exited(pod.Name)
		}()
		return proc, nil
	}
	stopMeasuring := h.Metrics.MeasurePods(ns, QuotaName, obs.MetricsAddrs)
	defer stopMeasuring()
	w, err := NewWorkload(ctx, WorkloadOptions{
		Client:     h.Client,
		Config:     h.Config,
		Metrics:    h.Metrics,
		Namespace:  ns,
		Kind:       kind,
		Name:       WorkloadName,
		HPA:        WorkloadName,
		Run:        run,
		Endpoints:  endpoints,
		StartDelay: s.PodStartDelay,
		PreStop:    preStop,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		err = errors.Join(err, w.Close(tctx))
	}()

	h.logf("[%s] Starting %d pods", v.Name, s.InitialReplicas)
	if err := w.Start(ctx, s.InitialReplicas); err != nil {
		return nil, err
	}
	if err := w.WaitReady(ctx, int(s.InitialReplicas), setupTimeout); err != nil {
		return nil, err
	}
	if v.Operator {
		// Start from a settled handover, as a workload that has run a while:
		// the last plan divides every usable permit over the running pods,
		// every pod acknowledged it and the Ready pods hold every usable
		// permit. (A StatefulSet's last pod is Ready a moment before the
		// plan for it: the others still hold all then.)
		err := waitFor(ctx, setupTimeout, "every pod acknowledging the plan and the Ready pods holding every usable permit", func() (bool, error) {
			r, pub, running := obs.Rollout(), obs.Published(), w.Running()
			held, _ := obs.PermitsOf(w.Ready(), "")
			return len(r) > 0 && r[len(r)-1].Total == s.InitialReplicas && len(pub) > 0 && planFor(pub[len(pub)-1], running) &&
				rolledOut(obs, running) && held == Usable(), h.ManagerErr()
		})
		if err != nil {
			return nil, err
		}
	}

	h.logf("[%s] Running the schedule: %v at %.0f requests/s", v.Name, s.Duration, s.RequestsPerSecond)
	data, err := h.conduct(ctx, v, s, ds, w, endpoints, obs, laggard)
	if err != nil {
		return nil, err
	}
	if v.Operator {
		// Let the last acknowledgements land before reading the rollout: a
		// handover may still be under way (a laggard takes its delay).
		_ = waitFor(ctx, 10*time.Second+v.Laggard, "the rollout of the last plan", func() (bool, error) {
			return rolledOut(obs, w.Running()), nil
		})
	}
	data.Published, data.Applied, data.Rollout = obs.Published(), obs.AppliedPlans(), obs.Rollout()
	data.Acks, data.Laggard = obs.LastAcks(), laggard()
	if v.Operator {
		data.PermitsCheck = obs.CheckPermits(ctx, QuotaName, w.Running())
	}
	if err := errors.Join(w.Err(), h.ManagerErr(), h.ControllersErr()); err != nil {
		return nil, err
	}
	return Analyze(data), nil
}

// podLogPath returns the file in dir for the log of pod's process:
// <pod>.log, or <pod>.<uid>.log when a pod of the same name (a StatefulSet's
// pod created again) already wrote that.
func podLogPath(dir string, pod *corev1.Pod) string {
	path := filepath.Join(dir, pod.Name+".log")
	if _, err := os.Stat(path); err == nil {
		return filepath.Join(dir, pod.Name+"."+string(pod.UID)+".log")
	}
	return path
}

// rolledOut says whether the quota's status counts every pod as having
// acknowledged the last published plan, and every running pod's annotation
// says so.
func rolledOut(obs *Observations, running []string) bool {
	pub, ro := obs.Published(), obs.Rollout()
	if len(pub) == 0 || len(ro) == 0 {
		return false
	}
	last, cur := pub[len(pub)-1], ro[len(ro)-1]
	if cur.Epoch != last.Epoch || cur.Revision != last.Revision || cur.Acknowledged != cur.Total {
		return false
	}
	acks := obs.LastAcks()
	for _, pod := range running {
		if acks[pod] != last.Ack().String() {
			return false
		}
	}
	return true
}

// conduct runs the schedule: the load, the latency steps, the scale steps a
// scenario asks the HPA for, if any, and the sampling of the downstream, the
// workload and its HPA. The HPA's decisions are recorded as they happen.
func (h *Harness) conduct(ctx context.Context, v Variant, s Schedule, ds *Downstream, w *Workload, endpoints *Endpoints, obs *Observations, laggard func() string) (*RunData, error) {
	start := time.Now().Add(50 * time.Millisecond)
	load := &Load{
		Rate:           s.RequestsPerSecond,
		Endpoints:      endpoints,
		MaxOutstanding: MaxOutstanding,
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan *LoadResult, 1)
	go func() { loadDone <- load.Run(loadCtx, start, s.Duration) }()

	samples := make(chan []Sample, 1)
	stopSampling := make(chan struct{})
	go func() {
		var out []Sample
		for i := 0; ; i++ {
			off := time.Duration(i) * SampleInterval
			select {
			case <-stopSampling:
				samples <- out
				return
			case <-time.After(time.Until(start.Add(off))):
			}
			out = append(out, sample(off, ds, w, s, obs, laggard()))
			if off >= s.Duration {
				<-stopSampling
				samples <- out
				return
			}
		}
	}()

	type event struct {
		at  time.Duration
		run func() error
	}
	var events []event
	for _, st := range s.Latency[1:] {
		events = append(events, event{st.At, func() error {
			h.logf("[%s] %5.1fs downstream latency → %v", v.Name, time.Since(start).Seconds(), st.Latency)
			ds.SetLatency(st.Latency)
			return nil
		}})
	}
	for _, st := range s.Scale {
		events = append(events, event{st.At, func() error {
			h.logf("[%s] %5.1fs the scenario asks the HPA for %d replicas", v.Name, time.Since(start).Seconds(), st.Replicas)
			return w.Scale(ctx, st.Replicas)
		}})
	}
	// Faults (faults.go) are events like the others; at the same offset
	// they come after a scale step.
	for _, f := range v.Faults {
		events = append(events, event{f.At, func() error {
			h.logf("[%s] %5.1fs fault: %s", v.Name, time.Since(start).Seconds(), f.Name)
			return f.Inject(ctx, &FaultRun{Harness: h, Workload: w, Observations: obs, Start: start, Namespace: Namespace(v)})
		}})
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
		if err := ev.run(); err != nil {
			runErr = err
			stopLoad()
			break
		}
	}
	res := <-loadDone
	close(stopSampling)
	scales := w.Scales(start)
	for _, sc := range scales {
		h.logf("[%s] %5.1fs the HPA scaled the %s: %d → %d replicas", v.Name, sc.At.Sub(start).Seconds(), cmp.Or(v.Kind, KindDeployment), sc.From, sc.To)
	}
	data := &RunData{
		Variant:  v,
		Schedule: s,
		Start:    start,
		Samples:  <-samples,
		Final:    ds.Sample(),
		Load:     res,
		Scales:   scales,
		Alive:    w.Running(),
	}
	if err := errors.Join(runErr, ctx.Err()); err != nil {
		return nil, err
	}
	if len(data.Samples) == 0 {
		return nil, fmt.Errorf("storm: no samples taken")
	}
	return data, nil
}

// sample takes one sample of the run at offset off.
func sample(off time.Duration, ds *Downstream, w *Workload, s Schedule, obs *Observations, laggard string) Sample {
	sm := Sample{At: off, Downstream: ds.Sample(), Pods: w.Counts(), HPA: w.HPA(), Latency: s.LatencyAt(off), Permits: obs.TotalPermits()}
	ready := w.Ready()
	sm.ReadyPermits, sm.LaggardPermits = obs.PermitsOf(ready, laggard)
	if laggard != "" {
		sm.LaggardReady = slices.Contains(ready, laggard)
		sm.LaggardRunning = slices.Contains(w.Running(), laggard)
		if !sm.LaggardReady {
			_, sm.LaggardPermits = obs.PermitsOf([]string{laggard}, laggard)
		}
	}
	return sm
}
