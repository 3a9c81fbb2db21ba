//go:build unix

package storm

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// The first-call scenario: PartialPods pods of the workload hold every
// usable permit under a steady load, then one more turns Ready and the
// balancer sends it its part of the calls. It measures how long that pod
// waits, from the moment it is Ready, for its first admitted call: with
// pods that acknowledge or not, with equal shares and no reserve or with
// the partial load's reserve lent by the permit server.
const (
	// FirstCallUnacknowledgedDelay is the quota's
	// spec.handover.unacknowledgedDelay while the load runs: shorter than
	// the default 150 s, to keep the run short; the wait of a pod that
	// does not acknowledge scales with it.
	FirstCallUnacknowledgedDelay = 20 * time.Second
	// firstCallSetupDelay is the delay while the pods start: each pod
	// that turns Ready takes a share from the ones before it, which pods
	// that do not acknowledge give up only after the delay. The quota
	// gets FirstCallUnacknowledgedDelay once the division has settled.
	firstCallSetupDelay = time.Second
	// FirstCallWarmup is the steady load before the new pod is asked for.
	FirstCallWarmup = 4 * time.Second
	// firstCallAfter is how long the load goes on after the new pod is
	// asked for, beside the unacknowledged delay when the new pod may wait
	// for it: its start, its first call, and room for a slow handover.
	firstCallAfter = 10 * time.Second
)

// FirstCallVariant is one run of the first-call scenario.
type FirstCallVariant struct {
	// Name names the run and its namespace (storm-first-call-<Name>).
	Name string
	// Acknowledge makes the pods acknowledge their plans.
	Acknowledge bool
	// Reserve pools PartialReserve of the usable permits in a reserve lent
	// by the permit server; without it the pods share them equally.
	Reserve bool
}

// FirstCallVariants are the scenario's four runs.
func FirstCallVariants() []FirstCallVariant {
	return []FirstCallVariant{
		{Name: "acknowledging-equal", Acknowledge: true},
		{Name: "silent-equal"},
		{Name: "acknowledging-reserve", Acknowledge: true, Reserve: true},
		{Name: "silent-reserve", Reserve: true},
	}
}

// waitsForDelay says whether the new pod of v may get its first call only
// once the pods that give it capacity are taken to have let go: they do
// not acknowledge, and there is no reserve to borrow from meanwhile.
func (v FirstCallVariant) waitsForDelay() bool { return !v.Acknowledge && !v.Reserve }

// FirstCallQuotaSpec is the first-call scenario's quota: the partial
// load's (the sample's contract, latency, waiting room and deadline) with
// equal shares, the reserve only when reserve is set, and the short
// unacknowledged delay of the pods' start.
func FirstCallQuotaSpec(reserve bool) v1alpha1.DownstreamQuotaSpec {
	s := PartialQuotaSpec()
	s.Shares = nil
	if !reserve {
		s.Reserve = nil
	}
	s.Handover.UnacknowledgedDelay = &metav1.Duration{Duration: firstCallSetupDelay}
	return s
}

// firstCallPerSecond is the offered load: what the usable permits serve
// at the downstream's latency (40 / 0.22 s), sent evenly and round-robin
// over the Ready pods, so that each pod's share is full: 5 in flight at
// each of 8 pods with equal shares, and with the reserve 3 of its own and
// 2 borrowed. Once the new pod is Ready each pod gets a ninth of it.
func firstCallPerSecond() float64 { return float64(Usable()) / PartialLatency.Seconds() }

// RunFirstCall runs one variant of the first-call scenario in a namespace
// of its own and returns its figures. An error means the harness could not
// run it, not that a goal was missed.
func (h *Harness) RunFirstCall(ctx context.Context, v FirstCallVariant) (*FirstCallRun, error) {
	st := newPartialStage(h, "first-call-"+v.Name, "", FirstCallQuotaSpec(v.Reserve))
	service := &traffic.Endpoints{Timeout: RequestTimeout}
	st.service, st.endpoints, st.silent = service, nil, !v.Acknowledge
	var run *FirstCallRun
	err := h.runPartial(ctx, st, func(ctx context.Context) error {
		defer service.Close()
		if err := st.lengthenDelay(ctx); err != nil {
			return err
		}
		var err error
		run, err = st.firstCall(ctx, v, service)
		return err
	})
	if err != nil {
		return nil, err
	}
	return run, nil
}

// lengthenDelay sets the quota's unacknowledged delay to
// FirstCallUnacknowledgedDelay and waits until every pod enforces a plan
// that carries it.
func (st *partialStage) lengthenDelay(ctx context.Context) error {
	patch := fmt.Sprintf(`{"spec":{"handover":{"unacknowledgedDelay":%q}}}`, FirstCallUnacknowledgedDelay)
	if err := st.h.Kubectl("patch", "downstreamquota", QuotaName, "--namespace", st.namespace, "--type=merge", "--patch", patch); err != nil {
		return err
	}
	// The pods' shares do not change; the document carries the new delay
	// under a revision of its own, which the pods put in force.
	err := cluster.WaitFor(ctx, setupTimeout, "the operator publishing the longer unacknowledged delay", func() (bool, error) {
		pub := st.obs.Published()
		return len(pub) > 0 && pub[len(pub)-1].UnacknowledgedDelay == FirstCallUnacknowledgedDelay && st.settled(), st.h.ManagerErr()
	})
	if err != nil {
		return err
	}
	pub := st.obs.Published()
	last := pub[len(pub)-1]
	st.h.logf("[%s] Published %s/%d (%s) with an unacknowledged delay of %v", st.name, last.Epoch, last.Revision, last.Hash, last.UnacknowledgedDelay)
	return nil
}

// firstCall runs the load over service, asks for one pod more after the
// warm-up, and measures the new pod's calls.
func (st *partialStage) firstCall(ctx context.Context, v FirstCallVariant, service *traffic.Endpoints) (*FirstCallRun, error) {
	h := st.h
	after := firstCallAfter
	if v.waitsForDelay() {
		after += FirstCallUnacknowledgedDelay
	}
	load := &traffic.Load{Rate: firstCallPerSecond(), Endpoints: service, MaxOutstanding: MaxOutstanding}
	start := time.Now().Add(50 * time.Millisecond)
	results := make(chan *traffic.LoadResult, 1)
	go func() { results <- load.Run(ctx, start, FirstCallWarmup+after) }()
	before := st.gateways.Running()
	h.logf("[%s] Load of %.0f calls/s over %d pods; one pod more at %v, the load ends %v later", st.name, load.Rate, len(before), FirstCallWarmup, after)
	var scaleErr error
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(start.Add(FirstCallWarmup))):
		scaleErr = st.gateways.Start(ctx, int32(st.pods+1))
	}
	res := <-results
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if scaleErr != nil {
		return nil, scaleErr
	}
	var life *cluster.PodLife
	for _, l := range st.gateways.Lives() {
		if !slices.Contains(before, l.Name) && !l.Ready.IsZero() {
			life = &l
		}
	}
	if life == nil {
		return nil, fmt.Errorf("storm: first call: no new pod turned Ready within %v", after)
	}
	final := st.downstream.Sample()
	r := &FirstCallRun{
		Variant: v.Name, Acknowledge: v.Acknowledge, Reserve: st.reserve(), Pods: st.pods, Usable: Usable(), Contract: Contract,
		CallsPerSecond: load.Rate, UnacknowledgedDelaySeconds: FirstCallUnacknowledgedDelay.Seconds(),
		NewPod: life.Name, ReadyAtSeconds: life.Ready.Sub(start).Seconds(),
		MeasuredSeconds: start.Add(FirstCallWarmup + after).Sub(life.Ready).Seconds(),
		PeakInFlight:    final.Peak, Downstream429: final.Rejected,
	}
	r.measure(res.Records, life.URL, life.Ready.Sub(start))
	for _, a := range st.obs.AppliedPlans() {
		if a.Pod == life.Name && a.Permits > 0 {
			granted := a.Time.Sub(life.Ready).Seconds()
			r.GrantedSeconds = &granted
			break
		}
	}
	h.logf("[%s] %s Ready at %.2fs: first admitted call %s after Ready, %d calls shed before it; own share %s after Ready; peak %d, 429s %d",
		st.name, r.NewPod, r.ReadyAtSeconds, SecondsOrNone(r.FirstAdmittedSeconds), r.ShedBefore, SecondsOrNone(r.GrantedSeconds),
		r.PeakInFlight, r.Downstream429)
	return r, nil
}

// measure counts the calls of records sent to url, the new pod's, which
// turned Ready at ready (offsets from the start of the load).
func (r *FirstCallRun) measure(records []traffic.Record, url string, ready time.Duration) {
	var mine []traffic.Record
	for _, rec := range records {
		if rec.Endpoint == url {
			mine = append(mine, rec)
		}
	}
	slices.SortFunc(mine, func(a, b traffic.Record) int { return int(a.At - b.At) })
	for _, rec := range mine {
		r.NewPodCalls++
		switch rec.Outcome {
		case traffic.OutcomeOK:
			r.NewPodAdmitted++
			if r.FirstAdmittedSeconds == nil {
				first := (rec.At - ready).Seconds()
				r.FirstAdmittedSeconds = &first
			}
		case traffic.OutcomeShed:
			if r.FirstAdmittedSeconds == nil {
				r.ShedBefore++
			}
		default:
			r.NewPodFailed++
		}
	}
}
