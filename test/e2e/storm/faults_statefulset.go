//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// The StatefulSet scenario's replica counts.
const (
	// StatefulSetFrom is the replicas before the story begins.
	StatefulSetFrom = 4
	// StatefulSetUp is the scale-up's count.
	StatefulSetUp = 7
	// StatefulSetDown is the scale-down's count.
	StatefulSetDown = 3
)

// The StatefulSet scenario's timeline. A departing pod's drain takes 0.3 s,
// or 5 s more when the load's HTTP client opened a connection to it that
// never carried a request (net/http's Shutdown waits that long for one);
// OrderedReady deletes the pods one at a time, each after the one above it
// has gone, so the scale-down's 4 pods may take 25 s.
const (
	// stsUpAt is the scale-up: the HPA decides within its sync period,
	// then the StatefulSet controller creates the 3 pods one at a time,
	// each once the one before it is Ready (PodStartDelay and the process's
	// start each).
	stsUpAt = time.Second
	// StatefulSetRecreateAt is when StatefulSetRecreated is deleted, as
	// `kubectl delete pod` or a node drain would: the StatefulSet controller
	// creates it again under its name once it is gone.
	StatefulSetRecreateAt = 16 * time.Second
	// stsDownAt is the scale-down: the controller deletes from the highest
	// ordinal, one pod at a time, each once the one after it is gone.
	stsDownAt   = 30 * time.Second
	stsDuration = 62 * time.Second
	// StatefulSetRecreated is the pod deleted and created again.
	StatefulSetRecreated = WorkloadName + "-1"
)

// StatefulSetSchedule is the StatefulSet scenario, 62 seconds at the
// typical latency, the search gateway being a StatefulSet (OrderedReady,
// manifests/statefulset.yaml) scaled by the real HPA through its scale
// subresource: 4 pods; at 1 s the autoscaler asks for 7; at 16 s
// search-gateway-1 is deleted and comes back under its name; at 30 s the
// autoscaler asks for 3. 7 and 3 do not divide the 40 usable permits:
// the exact division gives some pods one more.
func StatefulSetSchedule() schedule.Schedule {
	return faultSchedule(stsDuration, StatefulSetFrom, []schedule.ScaleStep{{At: stsUpAt, Replicas: StatefulSetUp}, {At: stsDownAt, Replicas: StatefulSetDown}}, schedule.Phase{Name: "4→7 pods, one at a time", From: 0, To: StatefulSetRecreateAt}, schedule.Phase{Name: StatefulSetRecreated + " deleted and created again", From: StatefulSetRecreateAt, To: stsDownAt}, schedule.Phase{Name: "7→3 pods, one at a time", From: stsDownAt, To: stsDuration})
}

// StatefulSetStep is the workload once one step of the scenario settled:
// the plan for the pods acknowledged by every one of them, the pods Ready.
type StatefulSetStep struct {
	Name string `json:"name"`
	// Want is the number of pods the step is for.
	Want int `json:"want"`
	// AtSeconds is when the step began: the scenario asked the HPA, or
	// deleted the pod.
	AtSeconds float64 `json:"atSeconds"`
	// DecidedSeconds is the time from AtSeconds to the HPA changing the
	// StatefulSet's spec.replicas (0 for the pod's deletion).
	DecidedSeconds float64 `json:"decidedSeconds,omitempty"`
	// SettledSeconds is the time from the decision (or the deletion) to the
	// harness seeing the step settled.
	SettledSeconds float64 `json:"settledSeconds"`
	// Pods are the running pods then, by ordinal, and Shares the permits
	// each enforced.
	Pods   []string `json:"pods"`
	Shares []int    `json:"shares"`
	// ReadyPods and ReadyPermits are the Ready pods and what they enforced
	// together.
	ReadyPods    int `json:"readyPods"`
	ReadyPermits int `json:"readyPermits"`
	// Err is set when the step did not settle in time.
	Err string `json:"err,omitempty"`
}

// StatefulSetPod is a pod the harness's kubelet ran, as offsets from the
// start of the load (negative: before it; 0: a stage not reached).
type StatefulSetPod struct {
	Name     string  `json:"name"`
	UID      string  `json:"uid"`
	Seen     float64 `json:"seenSeconds"`
	Started  float64 `json:"startedSeconds,omitempty"`
	Ready    float64 `json:"readySeconds,omitempty"`
	Stopping float64 `json:"stoppingSeconds,omitempty"`
	Exited   float64 `json:"exitedSeconds,omitempty"`
}

// StatefulSetReport is what the StatefulSet scenario measured.
type StatefulSetReport struct {
	// Steps are the scale-up, the pod created again and the scale-down,
	// each once settled.
	Steps []StatefulSetStep `json:"steps"`
	// Pods are every pod the kubelet ran, in the order it saw them.
	Pods []StatefulSetPod `json:"pods"`
	// CreationOrder and DeletionOrder list what broke the OrderedReady
	// order: a pod of the scale-up created before the one below it was
	// Ready, or a pod of the scale-down deleted before the one above it had
	// exited, or out of ordinal order. Empty when the order held.
	CreationOrder []string `json:"creationOrder,omitempty"`
	DeletionOrder []string `json:"deletionOrder,omitempty"`
	// Recreated is StatefulSetRecreated as the kubelet ran it: once before
	// its deletion and once after, each with a process of its own.
	Recreated []StatefulSetPod `json:"recreated"`
	// PeakRunningPermits is the most permits the running pods enforced
	// together in a sample: with the handover, shares grow only once the
	// shrinking pods acknowledged, so never beyond the usable total.
	PeakRunningPermits int `json:"peakRunningPermits"`
	// PeakHeld is the most the quota's status.division.held ever said.
	PeakHeld int32 `json:"peakHeld"`
	// RecreateReadyPermitsMin is the least the Ready pods held while
	// StatefulSetRecreated was gone and back, and RecreateBelowUsableSeconds
	// how long they held less than every usable permit: the deleted pod's
	// share goes to the others only once it has drained and released it.
	RecreateReadyPermitsMin    int     `json:"recreateReadyPermitsMin"`
	RecreateBelowUsableSeconds float64 `json:"recreateBelowUsableSeconds"`
	// Err is set when a measurement did not complete.
	Err string `json:"err,omitempty"`
	// Run is the scenario's run, as the storm reports a variant.
	Run *report.VariantReport `json:"run"`
}

// The bounds of the steps' settling: each must be done before the next
// event of the timeline.
const (
	stsUpTimeout       = StatefulSetRecreateAt - stsUpAt - time.Second
	stsRecreateTimeout = stsDownAt - StatefulSetRecreateAt - time.Second
	stsDownTimeout     = stsDuration - stsDownAt - 2*time.Second
)

// RunStatefulSet runs the StatefulSet scenario (see StatefulSetSchedule).
func (h *Harness) RunStatefulSet(ctx context.Context) (*StatefulSetReport, error) {
	rep := &StatefulSetReport{}
	var mu sync.Mutex
	var lives []cluster.PodLife
	var start time.Time
	addStep := func(st StatefulSetStep) {
		mu.Lock()
		rep.Steps = append(rep.Steps, st)
		mu.Unlock()
	}
	scaleStep := func(at time.Duration, want int, last bool) Event {
		return Event{
			At:   at,
			Name: fmt.Sprintf("wait for the %d pods %s Ready, on the plan for them", want, ordinals(want)),
			Do: func(ctx context.Context, stage *Stage) error {
				timeout := stsUpTimeout
				if last {
					timeout = stsDownTimeout
				}
				since := stage.Start.Add(at)
				st := h.stsSettle(ctx, stage, fmt.Sprintf("→ %d pods", want), since, since, ordinals(want), timeout)
				addStep(st)
				if last {
					mu.Lock()
					lives, start = stage.Workload().Lives(), stage.Start
					for _, ro := range stage.Observations().Rollout() {
						rep.PeakHeld = max(rep.PeakHeld, ro.Held)
					}
					mu.Unlock()
				}
				return nil
			},
		}
	}
	recreate := Event{
		At:   StatefulSetRecreateAt,
		Name: "delete " + StatefulSetRecreated + " and wait for the StatefulSet controller's new one on the plan",
		Do: func(ctx context.Context, stage *Stage) error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: stage.Namespace(), Name: StatefulSetRecreated}}
			deleted := time.Now()
			if err := h.Client.Delete(ctx, pod); err != nil {
				return fmt.Errorf("storm: delete pod %s: %w", StatefulSetRecreated, err)
			}
			// The plan need not change: the pod comes back under its name.
			st := h.stsSettle(ctx, stage, StatefulSetRecreated+" created again", deleted, time.Time{}, ordinals(StatefulSetUp), stsRecreateTimeout, func() bool {
				n := 0
				for _, l := range stage.Workload().Lives() {
					if l.Name == StatefulSetRecreated && l.Seen.After(deleted) && !l.Ready.IsZero() {
						n++
					}
				}
				return n == 1
			})
			addStep(st)
			return nil
		},
	}
	s := StatefulSetSchedule()
	v := faultVariant("statefulset", "the operator, the calling workload a StatefulSet (OrderedReady) scaled by the real HPA", s,
		scaleStep(stsUpAt, StatefulSetUp, false), recreate, scaleStep(stsDownAt, StatefulSetDown, true))
	v.Kind = cluster.KindStatefulSet
	run, err := h.Run(ctx, v, s)
	if err != nil {
		return nil, err
	}
	rep.Run = run
	mu.Lock()
	defer mu.Unlock()
	rep.analyze(lives, start)
	return rep, nil
}

// ordinals returns a StatefulSet's pod names for n replicas:
// search-gateway-0 … search-gateway-<n-1>.
func ordinals(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = WorkloadName + "-" + strconv.Itoa(i)
	}
	return out
}

// ordinal returns the ordinal of a StatefulSet's pod, -1 when name is not
// one of WorkloadName's.
func ordinal(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, WorkloadName+"-"))
	if err != nil || !strings.HasPrefix(name, WorkloadName+"-") {
		return -1
	}
	return n
}

// stsSettle waits, up to timeout, until exactly the pods want run, are
// Ready and hold every usable permit, a plan published after planSince
// gives them every usable permit, the last plan does too (no pod still
// waiting for its share in a handover), every one of them enforces and
// acknowledged it, and every extra condition holds; then it reads the step,
// which began at since.
func (h *Harness) stsSettle(ctx context.Context, stage *Stage, name string, since, planSince time.Time, want []string, timeout time.Duration, extra ...func() bool) StatefulSetStep {
	st := StatefulSetStep{Name: name, Want: len(want), AtSeconds: stage.Offset(since).Seconds()}
	from := since
	if sc := stage.Workload().Scales(since); len(sc) > 0 {
		from = sc[0].At
		st.DecidedSeconds = from.Sub(since).Seconds()
	}
	deadline := time.Now().Add(timeout)
	_, _, err := waitForPlan(ctx, stage, planSince, len(want), true, timeout)
	if err == nil {
		err = cluster.WaitFor(ctx, time.Until(deadline), "the pods "+strings.Join(want, ", ")+" Ready with every usable permit", func() (bool, error) {
			w := stage.Workload()
			held, _ := stage.Observations().PermitsOf(w.Ready(), "")
			pub := stage.Observations().Published()
			ok := slices.Equal(w.Running(), sortedNames(want)) && slices.Equal(w.Ready(), sortedNames(want)) &&
				w.Counts().Existing == len(want) && held == Usable() && stage.Observations().RolledOut(want) &&
				len(pub) > 0 && pub[len(pub)-1].Divides(want, Usable())
			for _, pod := range want {
				n, _ := stage.Observations().PermitsOf([]string{pod}, "")
				ok = ok && len(pub) > 0 && n == pub[len(pub)-1].PermitsOf(pod)
			}
			for _, cond := range extra {
				ok = ok && cond()
			}
			return ok, nil
		})
	}
	if err != nil {
		st.Err = err.Error()
	}
	// The moment the harness saw it settled: the decision's time to it.
	if sc := stage.Workload().Scales(since); st.DecidedSeconds == 0 && len(sc) > 0 {
		from = sc[0].At
		st.DecidedSeconds = from.Sub(since).Seconds()
	}
	st.SettledSeconds = time.Since(from).Seconds()
	running := stage.Workload().Running()
	slices.SortFunc(running, func(a, b string) int { return ordinal(a) - ordinal(b) })
	st.Pods = running
	for _, p := range running {
		n, _ := stage.Observations().PermitsOf([]string{p}, "")
		st.Shares = append(st.Shares, n)
	}
	ready := stage.Workload().Ready()
	st.ReadyPods = len(ready)
	st.ReadyPermits, _ = stage.Observations().PermitsOf(ready, "")
	return st
}

// sortedNames returns names sorted as Workload.Running sorts them.
func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}

// analyze reads the pods' lives (offsets from start) and the run's samples.
func (r *StatefulSetReport) analyze(lives []cluster.PodLife, start time.Time) {
	if len(lives) == 0 {
		r.Err = errors.Join(errors.New("storm: the pods' lives were not read (the scale-down's step did not run)"), errorOf(r.Err)).Error()
		return
	}
	off := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start).Seconds()
	}
	for _, l := range lives {
		p := StatefulSetPod{Name: l.Name, UID: string(l.UID), Seen: off(l.Seen), Started: off(l.Started), Ready: off(l.Ready),
			Stopping: off(l.Stopping), Exited: off(l.Exited)}
		r.Pods = append(r.Pods, p)
		if l.Name == StatefulSetRecreated {
			r.Recreated = append(r.Recreated, p)
		}
	}
	r.CreationOrder = creationOrder(lives, start.Add(stsUpAt), StatefulSetFrom, StatefulSetUp)
	r.DeletionOrder = deletionOrder(lives, start.Add(stsDownAt), StatefulSetDown, StatefulSetUp)
	if r.Run == nil {
		return
	}
	r.PeakRunningPermits = report.PeakPermits(r.Run)
	r.RecreateReadyPermitsMin = Usable()
	for _, p := range r.Run.Timeline {
		if p.At < StatefulSetRecreateAt.Seconds() || p.At >= stsDownAt.Seconds() {
			continue
		}
		r.RecreateReadyPermitsMin = min(r.RecreateReadyPermitsMin, p.ReadyPermits)
		if p.ReadyPermits < Usable() {
			r.RecreateBelowUsableSeconds += report.SampleInterval.Seconds()
		}
	}
}

// errorOf returns an error of msg, nil when it is empty.
func errorOf(msg string) error {
	if msg == "" {
		return nil
	}
	return errors.New(msg)
}

// creationOrder checks the scale-up's pods (ordinals from to to-1, seen
// after since): each appeared once, after the one below it was Ready.
func creationOrder(lives []cluster.PodLife, since time.Time, from, to int) []string {
	var bad []string
	byOrdinal := map[int]cluster.PodLife{}
	for _, l := range lives {
		if l.Seen.After(since) {
			if _, dup := byOrdinal[ordinal(l.Name)]; dup {
				bad = append(bad, l.Name+" created twice")
			}
			byOrdinal[ordinal(l.Name)] = l
		}
	}
	for i := from; i < to; i++ {
		l, ok := byOrdinal[i]
		if !ok || l.Ready.IsZero() {
			bad = append(bad, fmt.Sprintf("%s-%d not created or never Ready", WorkloadName, i))
			continue
		}
		if prev, ok := byOrdinal[i-1]; ok && l.Seen.Before(prev.Ready) {
			bad = append(bad, fmt.Sprintf("%s created %.2fs before %s was Ready", l.Name, prev.Ready.Sub(l.Seen).Seconds(), prev.Name))
		}
	}
	return bad
}

// deletionOrder checks the scale-down's pods (ordinals to-1 down to from,
// their deletion begun after since): each was deleted once the one above it
// had exited, and every other pod was left alone.
func deletionOrder(lives []cluster.PodLife, since time.Time, from, to int) []string {
	var bad []string
	byOrdinal := map[int]cluster.PodLife{}
	for _, l := range lives {
		if l.Stopping.After(since) {
			o := ordinal(l.Name)
			if o < from || o >= to {
				bad = append(bad, l.Name+" deleted, not one of the scale-down's")
			}
			byOrdinal[o] = l
		}
	}
	for i := to - 1; i >= from; i-- {
		l, ok := byOrdinal[i]
		if !ok || l.Exited.IsZero() {
			bad = append(bad, fmt.Sprintf("%s-%d not deleted, or its process did not exit", WorkloadName, i))
			continue
		}
		if above, ok := byOrdinal[i+1]; ok && l.Stopping.Before(above.Exited) {
			bad = append(bad, fmt.Sprintf("%s deleted %.2fs before %s had exited", l.Name, above.Exited.Sub(l.Stopping).Seconds(), above.Name))
		}
	}
	return bad
}
