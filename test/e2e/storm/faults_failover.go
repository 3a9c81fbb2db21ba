//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// The leader election timings of the failover scenario: short, so that the
// scenario takes seconds, in the proportions of client-go's defaults
// (15 s, 10 s, 2 s).
const (
	FailoverLeaseDuration = 4 * time.Second
	FailoverRenewDeadline = 3 * time.Second
	FailoverRetryPeriod   = time.Second
)

// FailoverLimit bounds the time from the leader's death to the new leader
// publishing the plan for the new replica count. The lease runs out at most
// a lease duration after the kill (the dead leader renewed it last just
// before); the survivor tries every retry period (jittered up to 1.2×) and
// so acquires it within two of them; then it starts its informers, waits
// for their caches and reconciles the quota, for which 5 s is generous on a
// loaded machine.
const FailoverLimit = FailoverLeaseDuration + 2*FailoverRetryPeriod + 5*time.Second

// FailoverScaleAt is when the failover scenario scales up; the leader is
// killed once it has published the scale-up's first plan.
const FailoverScaleAt = 4 * time.Second

// failoverReplicas are the failover scenario's replica counts.
const failoverFrom, failoverTo = 4, 8

// FailoverSchedule is the failover scenario, 16 seconds at the typical
// latency: 4 pods hold 10 permits each; at 4 s the autoscaler asks for 8;
// the leading manager publishes the first plan of the handover (the old
// pods shrink to 5) and is killed; the new pods become Ready while no
// replica leads, and their shares can only come from the new leader.
func FailoverSchedule() schedule.Schedule {
	return faultSchedule(16*time.Second, failoverFrom, []schedule.ScaleStep{{At: FailoverScaleAt, Replicas: failoverTo}}, schedule.Phase{Name: "4 pods, two managers", From: 0, To: FailoverScaleAt}, schedule.Phase{Name: "4→8 pods, leader killed", From: FailoverScaleAt, To: 16 * time.Second})
}

// FailoverReport is what the failover scenario measured.
type FailoverReport struct {
	// Killed is the manager that led and was killed; Survivor the one that
	// took over.
	Killed   string `json:"killed"`
	Survivor string `json:"survivor"`
	// KilledAtSeconds is the offset of the kill from the start of the load.
	KilledAtSeconds float64 `json:"killedAtSeconds"`
	// PlansBeforeKill counts the plans the killed leader published after
	// the scale-up began.
	PlansBeforeKill int `json:"plansBeforeKill"`
	// TakeoverSeconds is the time from the kill to the survivor acquiring
	// the lease.
	TakeoverSeconds float64 `json:"takeoverSeconds"`
	// FirstPlanSeconds is the time from the kill to the first plan the new
	// leader published.
	FirstPlanSeconds float64 `json:"firstPlanSeconds"`
	// NewCountPlanSeconds is the time from the kill to the plan that gives
	// the 8 pods every usable permit: the revision for the new replica
	// count.
	NewCountPlanSeconds float64 `json:"newCountPlanSeconds"`
	// SurvivorErr is set when the survivor exited during the scenario.
	SurvivorErr string `json:"survivorErr,omitempty"`
	// Err is set when a measurement did not complete.
	Err string `json:"err,omitempty"`
	// Run is the scenario's run, as the storm reports a variant.
	Run *report.VariantReport `json:"run"`
}

// RunFailover runs the failover scenario: two replicas of the manager with
// leader election (FailoverLeaseDuration, FailoverRenewDeadline,
// FailoverRetryPeriod), and the leader killed with SIGKILL in the middle of
// a scale-up (see FailoverSchedule). An error means the harness could not
// run the scenario; what the scenario measured is in the report.
func (h *Harness) RunFailover(ctx context.Context) (*FailoverReport, error) {
	rep := &FailoverReport{}
	lead := newLeadership()
	restore := h.ReplaceManager("failover")
	var replicas []*cluster.Process
	defer func() {
		for _, p := range replicas {
			_ = p.Terminate(10 * time.Second)
		}
		if err := restore(); err != nil {
			h.logf("Starting the manager again: %v", err)
		}
	}()
	for _, name := range []string{"manager-a", "manager-b"} {
		p, err := h.StartManagerReplica(name, lead.observe(name), failoverFlags()...)
		if err != nil {
			return nil, err
		}
		replicas = append(replicas, p)
	}
	err := func() error {
		byName := map[string]*cluster.Process{}
		for _, p := range replicas {
			byName[p.Name()] = p
		}
		// The harness's manager released the lease when it stopped: one of
		// the two acquires it at once.
		if _, _, err := lead.await("", 30*time.Second); err != nil {
			return err
		}
		var mu sync.Mutex
		kill := Event{
			At:   FailoverScaleAt,
			Name: "SIGKILL the leading manager once it published the scale-up's first plan",
			Do: func(ctx context.Context, st *Stage) error {
				scaled := st.Start.Add(FailoverScaleAt)
				// The HPA decides the scale-up within its sync period, then
				// the first new pod is bound, started and Ready: its plan
				// comes seconds after the scenario asks.
				_ = cluster.WaitFor(ctx, 15*time.Second, "the scale-up's first plan", func() (bool, error) {
					pub := st.Observations().Published()
					return len(pub) > 0 && pub[len(pub)-1].Seen.After(scaled), nil
				})
				leader, _ := lead.current()
				p := byName[leader]
				if p == nil {
					return fmt.Errorf("storm: no manager leads")
				}
				p.Kill()
				killed := time.Now()
				plans := 0
				for _, pub := range st.Observations().Published() {
					if pub.Seen.After(scaled) {
						plans++
					}
				}
				mu.Lock()
				rep.Killed, rep.KilledAtSeconds, rep.PlansBeforeKill = leader, st.Offset(killed).Seconds(), plans
				mu.Unlock()
				h.logf("[failover] %5.1fs killed %s, the leader, after %d plan(s) of the scale-up", st.Offset(killed).Seconds(), leader, plans)
				// Measured here, before the rest of the timeline: the run must
				// not end, and its pods go, before the new leader's plan came.
				if err := measureFailover(ctx, st, lead, leader, killed, rep, &mu); err != nil {
					mu.Lock()
					rep.Err = err.Error()
					mu.Unlock()
				}
				return nil
			},
		}
		v := faultVariant("failover", "the operator with two replicas; the leader is killed in the middle of a scale-up", FailoverSchedule(), kill)
		run, err := h.Run(ctx, v, *v.Schedule)
		mu.Lock()
		defer mu.Unlock()
		rep.Run = run
		if p := byName[rep.Survivor]; p != nil {
			select {
			case <-p.Done():
				rep.SurvivorErr = p.Exited().Error()
			default:
			}
		}
		return err
	}()
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// failoverFlags are the manager's leader election timings in the fault
// scenarios.
func failoverFlags() []string {
	return []string{
		"--leader-election-lease-duration", FailoverLeaseDuration.String(),
		"--leader-election-renew-deadline", FailoverRenewDeadline.String(),
		"--leader-election-retry-period", FailoverRetryPeriod.String(),
	}
}

// measureFailover waits for the survivor to lead and publish, and records
// the times from the kill.
func measureFailover(ctx context.Context, st *Stage, lead *leadership, killed string, at time.Time, rep *FailoverReport, mu *sync.Mutex) error {
	const timeout = 30 * time.Second
	survivor, since, err := lead.await(killed, timeout)
	if err != nil {
		return err
	}
	mu.Lock()
	rep.Survivor, rep.TakeoverSeconds = survivor, since.Sub(at).Seconds()
	mu.Unlock()
	var first time.Time
	err = cluster.WaitFor(ctx, timeout, "the new leader's first plan", func() (bool, error) {
		pub := st.Observations().Published()
		if n := len(pub); n > 0 && pub[n-1].Seen.After(at) {
			for _, p := range pub {
				if p.Seen.After(at) {
					first = p.Seen
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	published, _, perr := waitForPlan(ctx, st, at, failoverTo, false, timeout)
	mu.Lock()
	defer mu.Unlock()
	rep.FirstPlanSeconds = first.Sub(at).Seconds()
	if perr != nil {
		return errors.Join(errors.New("storm: the new leader did not publish the plan for the new replica count"), perr)
	}
	rep.NewCountPlanSeconds = published.Sub(at).Seconds()
	return nil
}
