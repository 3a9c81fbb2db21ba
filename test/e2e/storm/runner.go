//go:build unix

package storm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// The runner's bounds and the load's settings.
const (
	// RequestTimeout bounds one request of the load.
	RequestTimeout = 10 * time.Second
	// MaxOutstanding bounds the load's requests in flight.
	MaxOutstanding = 4096
	// setupTimeout bounds the start of a scenario's pods and plans.
	setupTimeout = 90 * time.Second
	// teardownTimeout bounds the graceful end of a scenario's pods.
	teardownTimeout = 60 * time.Second
	// rolloutWait bounds the wait, after the load, for the last handover to
	// finish (a laggard adds its delay).
	rolloutWait = 10 * time.Second
	// preStop is the pause between a pod leaving the endpoints and its
	// SIGTERM: requests picked for it just before are on their way.
	preStop = 200 * time.Millisecond
)

// Play runs a scenario through the runner's stages, in order: set up (the
// callers' namespaces and objects, the downstream), observe (the watches
// of the operator's plans, the quotas' rollout and the pods'
// acknowledgements, and the first plans), start the pods and settle the
// handover, conduct the timeline (the load, the latency and scale steps,
// the events, the sampling), finish (the last handover, what the run
// recorded) and tear down (every workload deleted and its pods stopped,
// also on error). The analysis is the caller's. An error means the harness
// could not run the scenario, not that a goal was missed.
func (h *Harness) Play(ctx context.Context, sc Scenario) (rec *Recording, err error) {
	if len(sc.Callers) == 0 || len(sc.Latency) == 0 || sc.Duration <= 0 {
		return nil, fmt.Errorf("storm: scenario %s: no callers, no latency or no duration", sc.Name)
	}
	st := &Stage{Harness: h}
	var teardown []func() error
	defer func() {
		// Last set up, first torn down.
		for i := len(teardown) - 1; i >= 0; i-- {
			err = errors.Join(err, teardown[i]())
		}
	}()
	logDir, err := h.setUp(sc, &teardown)
	if err != nil {
		return nil, err
	}
	if st.Downstream, err = traffic.StartDownstream(Contract, sc.Latency[0].Latency); err != nil {
		return nil, err
	}
	teardown = append(teardown, func() error { _ = st.Downstream.Close(); return nil })
	watchCtx, stopWatches := context.WithCancel(ctx)
	teardown = append(teardown, func() error { stopWatches(); return nil })
	var contract *observe.Contract
	if sc.Contract != "" {
		contract = &observe.Contract{}
		go contract.Watch(watchCtx, h.Client, sc.Contract)
	}
	for _, c := range sc.Callers {
		cs := &CallerStage{Caller: c, Observations: &observe.Observations{}, Endpoints: &traffic.Endpoints{Timeout: RequestTimeout}}
		st.Callers = append(st.Callers, cs)
		teardown = append(teardown, func() error { cs.Endpoints.Close(); return nil })
		if err := h.observe(ctx, watchCtx, sc, cs); err != nil {
			return nil, err
		}
	}
	for _, cs := range st.Callers {
		if err := h.startPods(ctx, sc, st, cs, logDir, &teardown); err != nil {
			return nil, err
		}
	}
	if err := h.settle(ctx, st); err != nil {
		return nil, err
	}
	h.logf("[%s] Running the scenario: %v", sc.Name, sc.Duration)
	if rec, err = h.conduct(ctx, sc, st, contract); err != nil {
		return nil, err
	}
	return rec, h.finish(ctx, sc, st, rec, contract)
}

// setUp is the first stage: the run's log directory, cleared of an earlier
// run's logs, the callers' namespaces, their manifests and the scenario's
// objects. It returns the log directory, and adds the deletion of the
// cluster-scoped objects to teardown.
func (h *Harness) setUp(sc Scenario, teardown *[]func() error) (string, error) {
	logDir := filepath.Join(h.OutDir, "logs", sc.Name)
	if err := os.RemoveAll(logDir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", err
	}
	for _, c := range sc.Callers {
		h.logf("[%s] Applying the %s %s, its HPA and its objects in namespace %s", sc.Name, cmp.Or(c.Kind, cluster.KindDeployment), c.Name, c.Namespace)
		if err := h.Kubectl("create", "namespace", c.Namespace); err != nil {
			return "", err
		}
		if len(c.NamespaceLabels) > 0 {
			label := []string{"label", "namespace", c.Namespace}
			for _, k := range slices.Sorted(maps.Keys(c.NamespaceLabels)) {
				label = append(label, k+"="+c.NamespaceLabels[k])
			}
			if err := h.Kubectl(label...); err != nil {
				return "", err
			}
		}
		if len(c.Manifests) > 0 {
			apply := []string{"apply", "--namespace", c.Namespace}
			for _, m := range c.Manifests {
				apply = append(apply, "-f", m)
			}
			if err := h.Kubectl(apply...); err != nil {
				return "", err
			}
		}
	}
	dir := filepath.Join(h.OutDir, "manifests", sc.Name)
	if len(sc.Objects) > 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
	}
	for i, obj := range sc.Objects {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, fmt.Sprintf("%02d-%s-%s.yaml", i, obj.GetNamespace(), obj.GetName()))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return "", err
		}
		if err := h.Kubectl("apply", "-f", path); err != nil {
			return "", err
		}
		if obj.GetNamespace() == "" {
			*teardown = append(*teardown, func() error { return h.Kubectl("delete", "-f", path, "--wait=false") })
		}
	}
	return logDir, nil
}

// observe is the second stage for one caller: with the operator, the
// watches of its plans, its quota's rollout and its pods'
// acknowledgements, until the operator published the first plan (the pods
// fail fast without one, as they should); without it, the plan written
// into the directory the pods read.
func (h *Harness) observe(ctx, watchCtx context.Context, sc Scenario, cs *CallerStage) error {
	if cs.ConfigMap == "" {
		if cs.Plan == nil {
			return fmt.Errorf("storm: scenario %s: caller %s has neither a ConfigMap nor a plan", sc.Name, cs.Name)
		}
		return WritePlanDir(h.planDir(sc, cs.Caller), *cs.Plan)
	}
	obs := cs.Observations
	go obs.WatchConfigMap(watchCtx, h.Client, cs.Namespace, cs.ConfigMap, cs.Gate)
	go obs.WatchQuota(watchCtx, h.Client, cs.Namespace, cs.Gate)
	go obs.WatchPods(watchCtx, h.Client, cs.Namespace, cs.Gate)
	return cluster.WaitFor(ctx, setupTimeout, "the operator publishing "+cs.Name+"'s plan", func() (bool, error) {
		return len(obs.Published()) > 0, h.ManagerErr()
	})
}

// planDir is where the pods of a caller without the operator read their
// plan.
func (h *Harness) planDir(sc Scenario, c Caller) string {
	dir := filepath.Join(h.OutDir, "plans", sc.Name)
	if len(sc.Callers) > 1 {
		dir = filepath.Join(dir, c.Name)
	}
	return dir
}

// startPods is the third stage for one caller: its workload read and
// watched, the pods' demand served to the HPA, and the initial replicas
// asked for. The workload's Close, which deletes it and waits for its pods
// to go, joins teardown.
func (h *Harness) startPods(ctx context.Context, sc Scenario, st *Stage, cs *CallerStage, logDir string, teardown *[]func() error) error {
	stopMeasuring := h.Metrics.MeasurePods(cs.Namespace, cs.Gate, cluster.DemandWindow, cs.Observations.MetricsAddrs)
	*teardown = append(*teardown, func() error { stopMeasuring(); return nil })
	w, err := cluster.NewWorkload(ctx, cluster.WorkloadOptions{
		Client:     h.Client,
		Config:     h.Config,
		Metrics:    h.Metrics,
		Namespace:  cs.Namespace,
		Kind:       cs.Kind,
		Name:       cs.Name,
		HPA:        cs.Name,
		Run:        h.podRunner(sc, st, cs, logDir),
		Endpoints:  cs.Endpoints,
		StartDelay: sc.PodStartDelay,
		PreStop:    preStop,
	})
	if err != nil {
		return err
	}
	cs.Workload = w
	*teardown = append(*teardown, func() error {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		return w.Close(tctx)
	})
	h.logf("[%s] Starting %d pods of %s in %s", sc.Name, cs.InitialReplicas, cs.Name, cs.Namespace)
	return w.Start(ctx, cs.InitialReplicas)
}

// settle is the end of the third stage: every caller's initial pods Ready
// and, with the operator, a settled handover, as a workload that has run a
// while has: the last plan divides what the caller holds over exactly its
// running pods, every pod acknowledged it, the quota's status counts them
// all, and the Ready pods hold it. (A StatefulSet's last pod is Ready a
// moment before the plan for it: the others still hold all then.)
func (h *Harness) settle(ctx context.Context, st *Stage) error {
	for _, cs := range st.Callers {
		if err := cs.Workload.WaitReady(ctx, int(cs.InitialReplicas), setupTimeout); err != nil {
			return err
		}
	}
	return cluster.WaitFor(ctx, setupTimeout, "every pod acknowledging its plan and the Ready pods holding what their caller holds", func() (bool, error) {
		for _, cs := range st.Callers {
			if cs.ConfigMap == "" {
				continue
			}
			obs, w := cs.Observations, cs.Workload
			ro, pub, running := obs.Rollout(), obs.Published(), w.Running()
			held, _ := obs.PermitsOf(w.Ready(), "")
			if len(ro) == 0 || ro[len(ro)-1].Total != cs.InitialReplicas || len(pub) == 0 || !pub[len(pub)-1].Divides(running, cs.Holds) ||
				!obs.RolledOut(running) || held != cs.Holds {
				return false, h.ManagerErr()
			}
		}
		return true, h.ManagerErr()
	})
}

// laggard is the pod of a caller that applies every new plan late: the
// first one started. Pods start from their own goroutines.
type laggard struct {
	mu   sync.Mutex
	name string
}

// claim makes pod the laggard when there is none yet, and says whether it
// is.
func (l *laggard) claim(pod string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.name == "" {
		l.name = pod
		return true
	}
	return false
}

// get returns the laggard's name, empty before the first pod started.
func (l *laggard) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.name
}
