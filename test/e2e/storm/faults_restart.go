//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// The API server restart scenario's timeline.
const (
	// RestartAt is when kube-apiserver is stopped.
	RestartAt = 4 * time.Second
	// RestartDown is how long it stays down before it starts again (its
	// own start, against the running etcd, adds to the outage).
	RestartDown = time.Second
	// RestartRecoveryLimit bounds the time from the API server answering
	// again to every pod enforcing and acknowledging the plan for the
	// replica count set right then. The outage outlasts the manager's renew
	// deadline, so the manager exits and starts again (its start, caches
	// and all, takes seconds on a loaded machine), and waits out the lease
	// its predecessor held (FailoverLeaseDuration); the watches of the pods
	// relist with client-go's backoff after their connection broke (0.8 s
	// doubling, jittered); the plan then takes a reconcile, a handover round
	// and the pods' acknowledgements, each sub-second.
	RestartRecoveryLimit = 20 * time.Second
)

// restartFrom and restartTo are the replica counts before the restart and
// right after it.
const restartFrom, restartTo = 6, 8

// RestartSchedule is the API server restart scenario, 24 seconds at the
// typical latency: 6 pods; at 4 s kube-apiserver stops, and is started again
// a second later; the moment it answers, the autoscaler asks for 8 pods.
func RestartSchedule() schedule.Schedule {
	return faultSchedule(24*time.Second, restartFrom, nil, schedule.Phase{Name: "6 pods", From: 0, To: RestartAt}, schedule.Phase{Name: "API server restarted, then 6→8 pods", From: RestartAt, To: 24 * time.Second})
}

// RestartReport is what the API server restart scenario measured.
type RestartReport struct {
	// StoppedAtSeconds is the offset of the stop from the start of the load.
	StoppedAtSeconds float64 `json:"stoppedAtSeconds"`
	// DownSeconds is the time from the stop to the API server answering
	// /healthz again.
	DownSeconds float64 `json:"downSeconds"`
	// FirstPlanSeconds is the time from the API server's return to the
	// first plan the manager published after it.
	FirstPlanSeconds float64 `json:"firstPlanSeconds"`
	// RecoveredSeconds is the time from the API server's return to every
	// running pod enforcing and acknowledging the plan for the 8 pods, with
	// the quota's status saying so.
	RecoveredSeconds float64 `json:"recoveredSeconds"`
	// OutageReadyPermitsMin and Max are the extremes of the Ready pods'
	// permits over the samples taken while the API server was down.
	OutageReadyPermitsMin int `json:"outageReadyPermitsMin"`
	OutageReadyPermitsMax int `json:"outageReadyPermitsMax"`
	// OutageSamples counts those samples.
	OutageSamples int `json:"outageSamples"`
	// BadPlans lists plans a pod applied while the API server was down
	// with no permits or more than the usable total: a gate that lost its
	// plan, or whose plan's source lapsed.
	BadPlans []string `json:"badPlans,omitempty"`
	// ManagerRestarts counts the manager's restarts: a replica whose lease
	// ran out while the API server was down exits, and is started again.
	ManagerRestarts int `json:"managerRestarts"`
	// Err is set when a measurement did not complete.
	Err string `json:"err,omitempty"`
	// Run is the scenario's run, as the storm reports a variant.
	Run *report.VariantReport `json:"run"`
}

// RunAPIServerRestart runs the API server restart scenario (see
// RestartSchedule) with one replica of the manager on the failover
// scenario's lease timings, started again whenever it exits, as its
// Deployment would. An error means the harness could not run the scenario.
func (h *Harness) RunAPIServerRestart(ctx context.Context) (*RestartReport, error) {
	rep := &RestartReport{}
	restore := h.ReplaceManager("apiserver-restart")
	sm, err := h.SuperviseManager("manager-restart", failoverFlags()...)
	defer func() {
		if sm != nil {
			sm.Stop()
		}
		if err := restore(); err != nil {
			h.logf("Starting the manager again: %v", err)
		}
	}()
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var stopped, back, loadStart time.Time
	restart := Event{
		At:   RestartAt,
		Name: fmt.Sprintf("restart kube-apiserver (%v down), then scale to %d pods", RestartDown, restartTo),
		Do: func(ctx context.Context, st *Stage) error {
			var err error
			loadStart = st.Start
			stopped, back, err = h.RestartAPIServer(RestartDown)
			if err != nil {
				return err
			}
			h.logf("[%s] %5.1fs kube-apiserver back after %.2fs", st.Namespace(), st.Offset(back).Seconds(), back.Sub(stopped).Seconds())
			// The first requests after /healthz may still meet a server
			// finishing its start: retry the scale briefly.
			var scaleErr error
			for range 10 {
				if scaleErr = st.Workload().RaiseFloor(ctx, restartTo); scaleErr == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if scaleErr != nil {
				return scaleErr
			}
			// Measured here, before the rest of the timeline: the run must
			// not end, and its pods go, before they recovered.
			if err := measureRestart(ctx, st, stopped, back, rep, &mu); err != nil {
				mu.Lock()
				rep.Err = err.Error()
				mu.Unlock()
			}
			return nil
		},
	}
	v := faultVariant("apiserver-restart", "the operator while kube-apiserver restarts, with a scale-up the moment it is back", RestartSchedule(), restart)
	run, err := h.Run(ctx, v, *v.Schedule)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	rep.Run = run
	rep.ManagerRestarts = len(sm.Restarts())
	if stopped.IsZero() || back.IsZero() {
		return nil, errors.New("storm: the API server was not restarted")
	}
	from, to := stopped.Sub(loadStart).Seconds(), back.Sub(loadStart).Seconds()
	rep.OutageReadyPermitsMin = Usable() + 1
	for _, p := range run.Timeline {
		if p.At < from || p.At > to {
			continue
		}
		rep.OutageSamples++
		rep.OutageReadyPermitsMin = min(rep.OutageReadyPermitsMin, p.ReadyPermits)
		rep.OutageReadyPermitsMax = max(rep.OutageReadyPermitsMax, p.ReadyPermits)
	}
	return rep, nil
}

// measureRestart records the outage and the time to recover from it.
func measureRestart(ctx context.Context, st *Stage, stopped, back time.Time, rep *RestartReport, mu *sync.Mutex) error {
	_, done, err := waitForPlan(ctx, st, back, restartTo, true, 2*RestartRecoveryLimit)
	mu.Lock()
	defer mu.Unlock()
	rep.StoppedAtSeconds = st.Offset(stopped).Seconds()
	rep.DownSeconds = back.Sub(stopped).Seconds()
	for _, p := range st.Observations().Published() {
		if p.Seen.After(back) {
			rep.FirstPlanSeconds = p.Seen.Sub(back).Seconds()
			break
		}
	}
	for _, a := range st.Observations().AppliedPlans() {
		if a.Time.After(stopped) && a.Time.Before(back) && (a.Permits < 1 || a.Permits > Usable()) {
			rep.BadPlans = append(rep.BadPlans, fmt.Sprintf("%s applied %d permits at %.1fs", a.Pod, a.Permits, st.Offset(a.Time).Seconds()))
		}
	}
	if err != nil {
		return err
	}
	rep.RecoveredSeconds = done.Sub(back).Seconds()
	return nil
}
