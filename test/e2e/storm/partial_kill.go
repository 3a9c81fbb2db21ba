//go:build unix

package storm

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// The permit server killed: the partial load with a random balancer, the
// permit server's replica killed (SIGKILL) mid-run and started again by
// its Deployment.
const (
	// BrokerKillAt is when the replica is killed, after the warm-up.
	BrokerKillAt = 45 * time.Second
	// BrokerKillDuration is the whole load.
	BrokerKillDuration = 75 * time.Second
	// BrokerKillUnacknowledgedDelay is the quota's
	// spec.handover.unacknowledgedDelay in this run: the killed replica
	// never hands its slice back, and the new one gets it once this has
	// passed, before the end of its learning, so that what keeps it from
	// granting is its learning, which the run checks.
	BrokerKillUnacknowledgedDelay = time.Second
	// grantSampleInterval is how often the pods' borrow counters are read
	// after the kill.
	grantSampleInterval = 100 * time.Millisecond
)

// BrokerKillSpec is the partial load's quota with the short
// unacknowledged delay of the kill run.
func BrokerKillSpec() v1alpha1.DownstreamQuotaSpec {
	s := PartialQuotaSpec()
	s.Handover.UnacknowledgedDelay = &metav1.Duration{Duration: BrokerKillUnacknowledgedDelay}
	return s
}

// RunPartialLoadBrokerKilled runs the partial load with a random balancer
// and kills the permit server's replica at BrokerKillAt.
func (h *Harness) RunPartialLoadBrokerKilled(ctx context.Context) (*BrokerKillRun, error) {
	st := newPartialStage(h, "partial-broker-killed", PartialRandom, BrokerKillSpec())
	st.duration, st.warmup, st.killAt = BrokerKillDuration, PartialWarmup, BrokerKillAt
	var run *PartialLoadRun
	err := h.runPartial(ctx, st, func(ctx context.Context) (err error) {
		h.logf("[%s] Running the load: %v, the first %v a warm-up", st.name, st.duration, st.warmup)
		run, err = st.run(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	k := st.kill
	k.Run = run
	return &k.BrokerKillRun, nil
}

// brokerKill kills the permit server's replica and watches the pods'
// borrows after it.
type brokerKill struct {
	BrokerKillRun
	done chan struct{}
}

// startBrokerKill kills the replica at st.killAt after start and reads the
// pods' borrow counters every grantSampleInterval from then until stop.
func (st *partialStage) startBrokerKill(ctx context.Context, start time.Time, stop <-chan struct{}) *brokerKill {
	k := &brokerKill{done: make(chan struct{})}
	k.MaxLeaseSeconds = PartialMaxLease.Seconds()
	go func() {
		defer close(k.done)
		select {
		case <-time.After(time.Until(start.Add(st.killAt))):
		case <-ctx.Done():
			return
		}
		proc := st.lastBroker()
		killed := time.Now()
		proc.Kill()
		<-proc.Done()
		k.KilledAtSeconds = killed.Sub(start).Seconds()
		st.h.logf("[%s] Killed the permit server %s at %.1fs", st.name, proc.Name(), k.KilledAtSeconds)
		// Nothing is lent after the kill until a new replica lends: the
		// counters read now are the baseline.
		base := scrapeGateCounters(ctx, st.obs.MetricsAddrs())
		for base.err != nil && ctx.Err() == nil {
			k.SampleErrors++
			base = scrapeGateCounters(ctx, st.obs.MetricsAddrs())
		}
		expiry := killed.Add(PartialMaxLease)
		t := time.NewTicker(grantSampleInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			at := time.Now()
			c := scrapeGateCounters(ctx, st.obs.MetricsAddrs())
			if c.err != nil {
				k.SampleErrors++
				continue
			}
			lent := c.borrowed > base.borrowed
			if at.Before(expiry) {
				k.SamplesBeforeExpiry++
				k.LastSampleBeforeExpirySeconds = at.Sub(start).Seconds()
				if lent {
					k.GrantsBeforeExpiry++
				}
			}
			if lent && k.FirstGrantSeconds == 0 {
				k.FirstGrantSeconds = at.Sub(start).Seconds()
			}
		}
	}()
	return k
}

// finish waits for the watch to end and counts the calls of the outage
// from the calls and the pods' outcomes.
func (k *brokerKill) finish(st *partialStage, calls []partialCall, outcomes []traffic.Outcome) {
	<-k.done
	st.brokersMu.Lock()
	if len(st.brokerStarts) > 1 {
		k.RestartedAtSeconds = st.brokerStarts[len(st.brokerStarts)-1].Sub(st.loadStart).Seconds()
	}
	st.brokersMu.Unlock()
	end := k.FirstGrantSeconds
	if end == 0 {
		end = st.duration.Seconds()
	}
	for i, c := range calls {
		if at := c.At.Seconds(); at >= k.KilledAtSeconds && at < end {
			k.OutageCalls++
			if outcomes[i] == traffic.OutcomeOK {
				k.OutageAdmitted++
			}
		}
	}
}
