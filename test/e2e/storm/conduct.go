//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// conduct is the fourth stage: each caller's open-loop load from a moment
// just ahead, the timeline's events at their offsets (the downstream's
// latency steps, the replica counts each caller asks its HPA for, the
// scenario's events, in that order at the same offset), and a sample of
// the downstream and every caller every report.SampleInterval. It returns
// once the loads have ended.
func (h *Harness) conduct(ctx context.Context, sc Scenario, st *Stage, contract *observe.Contract) (*Recording, error) {
	st.Start = time.Now().Add(50 * time.Millisecond)
	rec := &Recording{Start: st.Start, Callers: make([]CallerRecording, len(st.Callers))}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var loads sync.WaitGroup
	for i, cs := range st.Callers {
		l := &traffic.Load{Rate: cs.RequestsPerSecond, Endpoints: cs.Endpoints, MaxOutstanding: MaxOutstanding}
		loads.Go(func() { rec.Callers[i].Load = l.Run(loadCtx, st.Start, sc.Duration) })
	}
	samples := make(chan []report.CallersSample, 1)
	stopSampling := make(chan struct{})
	go func() { samples <- h.sampleUntil(sc, st, contract, stopSampling) }()

	var runErr error
	for _, ev := range h.timeline(sc, st) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(st.Start.Add(ev.At))):
		}
		if ctx.Err() != nil {
			break
		}
		if err := ev.Do(ctx, st); err != nil {
			runErr = err
			stopLoad()
			break
		}
	}
	loads.Wait()
	close(stopSampling)
	rec.Samples, rec.Final = <-samples, st.Downstream.Sample()
	for i, cs := range st.Callers {
		rec.Callers[i].Alive = cs.Workload.Running()
		rec.Callers[i].Scales = cs.Workload.Scales(st.Start)
		for _, ev := range rec.Callers[i].Scales {
			h.logf("[%s] %5.1fs the HPA scaled %s: %d → %d replicas", sc.Name, ev.At.Sub(st.Start).Seconds(), cs.Name, ev.From, ev.To)
		}
	}
	if err := errors.Join(runErr, ctx.Err()); err != nil {
		return nil, err
	}
	if len(rec.Samples) == 0 {
		return nil, errors.New("storm: no samples taken")
	}
	return rec, nil
}

// timeline returns the events of the run in the order they happen: the
// downstream's latency steps, each caller's scale steps and the scenario's
// events, sorted by offset and, at the same offset, in that order.
func (h *Harness) timeline(sc Scenario, st *Stage) []Event {
	var events []Event
	for _, step := range sc.Latency[1:] {
		events = append(events, Event{At: step.At, Name: "downstream latency", Do: func(context.Context, *Stage) error {
			h.logf("[%s] %5.1fs downstream latency → %v", sc.Name, time.Since(st.Start).Seconds(), step.Latency)
			st.Downstream.SetLatency(step.Latency)
			return nil
		}})
	}
	for _, cs := range st.Callers {
		for _, step := range cs.Scale {
			events = append(events, Event{At: step.At, Name: "scale step", Do: func(ctx context.Context, _ *Stage) error {
				h.logf("[%s] %5.1fs the scenario asks the HPA of %s for %d replicas (it has %d)", sc.Name, time.Since(st.Start).Seconds(),
					cs.Name, step.Replicas, cs.Workload.Counts().Desired)
				return cs.Workload.Scale(ctx, step.Replicas)
			}})
		}
	}
	for _, ev := range sc.Events {
		events = append(events, Event{At: ev.At, Name: ev.Name, Do: func(ctx context.Context, st *Stage) error {
			h.logf("[%s] %5.1fs %s", sc.Name, time.Since(st.Start).Seconds(), ev.Name)
			return ev.Do(ctx, st)
		}})
	}
	slices.SortStableFunc(events, func(a, b Event) int { return int(a.At - b.At) })
	return events
}

// sampleUntil takes a sample at every report.SampleInterval from the start
// of the load, until the sample at the end of the run or stop, and returns
// them.
func (h *Harness) sampleUntil(sc Scenario, st *Stage, contract *observe.Contract, stop <-chan struct{}) []report.CallersSample {
	var out []report.CallersSample
	for i := 0; ; i++ {
		off := time.Duration(i) * report.SampleInterval
		select {
		case <-stop:
			return out
		case <-time.After(time.Until(st.Start.Add(off))):
		}
		out = append(out, sample(sc, st, contract, off))
		if off >= sc.Duration {
			<-stop
			return out
		}
	}
}

// sample takes one sample of the run at offset off.
func sample(sc Scenario, st *Stage, contract *observe.Contract, off time.Duration) report.CallersSample {
	sm := report.CallersSample{At: off, Downstream: st.Downstream.Sample(), Latency: schedule.Schedule{Latency: sc.Latency}.LatencyAt(off)}
	for _, cs := range st.Callers {
		w, obs, lag := cs.Workload, cs.Observations, cs.laggard.get()
		ready := w.Ready()
		c := report.CallerSample{Pods: w.Counts(), HPA: w.HPA(), Permits: obs.TotalPermits()}
		c.ReadyPermits, c.LaggardPermits = obs.PermitsOf(ready, lag)
		if lag != "" {
			c.LaggardReady = slices.Contains(ready, lag)
			c.LaggardRunning = slices.Contains(w.Running(), lag)
			if !c.LaggardReady {
				_, c.LaggardPermits = obs.PermitsOf([]string{lag}, lag)
			}
		}
		sm.Callers = append(sm.Callers, c)
	}
	if contract != nil {
		sm.Parts = contract.Parts()
	}
	return sm
}

// finish is the fifth stage: the last handover let finish (a laggard takes
// its delay), then what each caller's observations recorded, its pods'
// permits checked against their metrics, and the errors of the workloads,
// the manager and kube-controller-manager.
func (h *Harness) finish(ctx context.Context, sc Scenario, st *Stage, rec *Recording, contract *observe.Contract) error {
	wait := rolloutWait
	for _, cs := range st.Callers {
		wait = max(wait, rolloutWait+cs.Laggard)
	}
	_ = waitRolledOut(ctx, st, wait)
	var errs []error
	for i, cs := range st.Callers {
		obs, r := cs.Observations, &rec.Callers[i]
		r.Published, r.Applied, r.Rollout = obs.Published(), obs.AppliedPlans(), obs.Rollout()
		r.Acks, r.Laggard = obs.LastAcks(), cs.laggard.get()
		if cs.ConfigMap != "" {
			r.PermitsCheck = obs.CheckPermits(ctx, cs.Gate, cs.Workload.Running())
		}
		errs = append(errs, cs.Workload.Err())
	}
	if contract != nil {
		rec.Contract = contract.Last()
	}
	if err := errors.Join(append(errs, h.ManagerErr(), h.ControllersErr())...); err != nil {
		return fmt.Errorf("storm: scenario %s: %w", sc.Name, err)
	}
	return nil
}

// waitRolledOut waits up to timeout until every caller with the operator
// has its last plan acknowledged by every running pod, as the quota's
// status and the pods' annotations say.
func waitRolledOut(ctx context.Context, st *Stage, timeout time.Duration) error {
	return cluster.WaitFor(ctx, timeout, "the rollout of every caller's last plan", func() (bool, error) {
		for _, cs := range st.Callers {
			if cs.ConfigMap != "" && !cs.Observations.RolledOut(cs.Workload.Running()) {
				return false, nil
			}
		}
		return true, nil
	})
}
