//go:build unix

package storm

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// StatefulSetSchedule is the StatefulSet caller's scenario, 18 seconds at the
// typical latency: search-gateway-0..2; at 4 s the autoscaler asks for 6
// pods (ordinals 3..5 start), at 11 s for 2 (ordinals 5..2 go).
func StatefulSetSchedule() Schedule {
	return faultSchedule(18*time.Second, 3, []ScaleStep{{At: 4 * time.Second, Replicas: 6}, {At: 11 * time.Second, Replicas: 2}},
		Phase{Name: "3 pods", From: 0, To: 4 * time.Second},
		Phase{Name: "3→6 pods", From: 4 * time.Second, To: 11 * time.Second},
		Phase{Name: "6→2 pods", From: 11 * time.Second, To: 18 * time.Second})
}

// StatefulCheckpoint is the StatefulSet's pods and their permits once the
// handover for a replica count was done.
type StatefulCheckpoint struct {
	AtSeconds float64 `json:"atSeconds"`
	// Want is the replica count the autoscaler had set.
	Want int `json:"want"`
	// Running names the pods that run and are not terminating.
	Running []string `json:"running"`
	// ReadyPermits is the sum of the permits the Ready pods enforce.
	ReadyPermits int `json:"readyPermits"`
	// Err is set when the handover did not settle.
	Err string `json:"err,omitempty"`
}

// StatefulSetReport is what the StatefulSet caller's scenario measured.
type StatefulSetReport struct {
	Checkpoints []StatefulCheckpoint `json:"checkpoints"`
	// Run is the scenario's run, as the storm reports a variant.
	Run *VariantReport `json:"run"`
}

// RunStatefulSet runs the StatefulSet caller's scenario (see
// StatefulSetSchedule): the quota's workloadRef names a StatefulSet.
func (h *Harness) RunStatefulSet(ctx context.Context) (*StatefulSetReport, error) {
	rep := &StatefulSetReport{}
	var mu sync.Mutex
	s := StatefulSetSchedule()
	checkpoint := func(at time.Duration, want int) Fault {
		return Fault{
			At:   at,
			Name: fmt.Sprintf("read the pods once the %d Ready pods hold every usable permit", want),
			Inject: func(ctx context.Context, fr *FaultRun) error {
				_, _, err := waitForPlan(ctx, fr, time.Time{}, want, true, 10*time.Second)
				cp := StatefulCheckpoint{AtSeconds: fr.Offset(time.Now()).Seconds(), Want: want, Running: fr.Workload.Running()}
				cp.ReadyPermits, _ = fr.Observations.PermitsOf(fr.Workload.Ready(), "")
				if err != nil {
					cp.Err = err.Error()
				}
				mu.Lock()
				rep.Checkpoints = append(rep.Checkpoints, cp)
				mu.Unlock()
				return nil
			},
		}
	}
	v := faultVariant("statefulset", "the operator with a StatefulSet caller", s,
		checkpoint(3*time.Second, 3), checkpoint(10*time.Second, 6), checkpoint(s.Duration-time.Second, 2))
	v.StatefulSet = true
	run, err := h.Run(ctx, v, s)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	rep.Run = run
	return rep, nil
}
