//go:build unix

package storm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// The finished pods scenario's timeline.
const (
	finishedFrom, finishedTo = 4, 6
	// FinishedPodsAt is when the evicted and the completed pod appear.
	FinishedPodsAt = time.Second
	// finishedScaleAt is the scale-up that follows.
	finishedScaleAt = 6 * time.Second
)

// FinishedPodsSchedule is the finished pods scenario, 14 seconds at the
// typical latency: 4 pods; at 1 s an evicted pod (phase Failed, reason
// Evicted) and a completed one (phase Succeeded) of the same ReplicaSet
// appear and stay, as they do until the pod garbage collector's threshold;
// at 6 s the autoscaler asks for 6 pods. The two hold no calls: the usable
// permits must stay divided over the Ready pods alone.
func FinishedPodsSchedule() schedule.Schedule {
	return faultSchedule(14*time.Second, finishedFrom, []schedule.ScaleStep{{At: finishedScaleAt, Replicas: finishedTo}}, schedule.Phase{Name: "4 pods, one evicted and one completed beside them", From: 0, To: finishedScaleAt}, schedule.Phase{Name: "4→6 pods", From: finishedScaleAt, To: 14 * time.Second})
}

// FinishedCheckpoint is the division as the quota's status and the
// published plan had it once the handover for the Ready pods was done.
type FinishedCheckpoint struct {
	AtSeconds float64 `json:"atSeconds"`
	// ReadyPods counts the workload's Ready pods (the harness's view).
	ReadyPods int `json:"readyPods"`
	// ReadyPermits is the sum of the permits the Ready pods enforce.
	ReadyPermits int `json:"readyPermits"`
	// Divisor, StatusReadyPods and ExistingPods are status.replicas'.
	Divisor         int32 `json:"divisor"`
	StatusReadyPods int32 `json:"statusReadyPods"`
	ExistingPods    int32 `json:"existingPods"`
	// Usable and Base are status.division's.
	Usable int32 `json:"usable"`
	Base   int32 `json:"base"`
	// FinishedNamed lists where a finished pod was named: in
	// status.division.pods or in the published plan.
	FinishedNamed []string `json:"finishedNamed,omitempty"`
	// Err is set when the handover did not settle.
	Err string `json:"err,omitempty"`
}

// FinishedPodsReport is what the finished pods scenario measured.
type FinishedPodsReport struct {
	// Evicted and Completed name the two finished pods.
	Evicted   string `json:"evicted"`
	Completed string `json:"completed"`
	// Checkpoints are taken before the scale-up and at the end.
	Checkpoints []FinishedCheckpoint `json:"checkpoints"`
	// Run is the scenario's run, as the storm reports a variant.
	Run *report.VariantReport `json:"run"`
}

// RunFinishedPods runs the finished pods scenario (see
// FinishedPodsSchedule).
func (h *Harness) RunFinishedPods(ctx context.Context) (*FinishedPodsReport, error) {
	rep := &FinishedPodsReport{}
	var mu sync.Mutex
	checkpoint := func(at time.Duration, want int) Event {
		return Event{
			At:   at,
			Name: fmt.Sprintf("read the division once the %d Ready pods hold every usable permit", want),
			Do: func(ctx context.Context, st *Stage) error {
				cp := h.finishedCheckpoint(ctx, st, want, rep.Evicted, rep.Completed)
				mu.Lock()
				rep.Checkpoints = append(rep.Checkpoints, cp)
				mu.Unlock()
				return nil
			},
		}
	}
	finished := Event{
		At:   FinishedPodsAt,
		Name: "an evicted and a completed pod of the ReplicaSet appear",
		Do: func(ctx context.Context, st *Stage) error {
			w := st.Workload()
			rs, err := w.ReplicaSet(ctx)
			if err != nil {
				return err
			}
			rep.Evicted, rep.Completed = rs.Name+"-evicted", rs.Name+"-completed"
			if err := w.CreateFinishedPod(ctx, rs, rep.Evicted, corev1.PodStatus{
				Phase: corev1.PodFailed, Reason: "Evicted",
				Message: "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91Mi.",
			}); err != nil {
				return err
			}
			now := metav1.Now()
			return w.CreateFinishedPod(ctx, rs, rep.Completed, corev1.PodStatus{
				Phase: corev1.PodSucceeded,
				ContainerStatuses: []corev1.ContainerStatus{{Name: rs.Spec.Template.Spec.Containers[0].Name, State: corev1.ContainerState{
					Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: now},
				}}},
			})
		},
	}
	s := FinishedPodsSchedule()
	v := faultVariant("finished-pods", "the operator beside an evicted and a completed pod of the workload", s,
		finished, checkpoint(finishedScaleAt-2*time.Second, finishedFrom), checkpoint(s.Duration-3*time.Second, finishedTo))
	run, err := h.Run(ctx, v, s)
	if err != nil {
		return nil, err
	}
	rep.Run = run
	return rep, nil
}

// finishedCheckpoint waits, up to 10 s, for a plan (published at any time)
// that gives the want running pods every usable permit, acknowledged, and
// reads the quota's status.
func (h *Harness) finishedCheckpoint(ctx context.Context, st *Stage, want int, finished ...string) FinishedCheckpoint {
	_, _, err := waitForPlan(ctx, st, time.Time{}, want, true, 10*time.Second)
	cp := FinishedCheckpoint{AtSeconds: st.Offset(time.Now()).Seconds()}
	if err != nil {
		cp.Err = err.Error()
	}
	ready := st.Workload().Ready()
	cp.ReadyPods = len(ready)
	cp.ReadyPermits, _ = st.Observations().PermitsOf(ready, "")
	var q v1alpha1.DownstreamQuota
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: st.Namespace(), Name: QuotaName}, &q); err != nil {
		cp.Err = err.Error()
		return cp
	}
	if r := q.Status.Replicas; r != nil {
		cp.Divisor, cp.StatusReadyPods, cp.ExistingPods = r.Divisor, r.ReadyPods, r.ExistingPods
	}
	if d := q.Status.Division; d != nil {
		cp.Usable, cp.Base = d.Usable, d.Base
		for _, p := range d.Pods {
			if slices.Contains(finished, p.Name) {
				cp.FinishedNamed = append(cp.FinishedNamed, "status.division.pods: "+p.Name)
			}
		}
	}
	if pub := st.Observations().Published(); len(pub) > 0 {
		for _, name := range finished {
			if _, ok := pub[len(pub)-1].Pods[name]; ok {
				cp.FinishedNamed = append(cp.FinishedNamed, "the published plan: "+name)
			}
		}
	}
	return cp
}
