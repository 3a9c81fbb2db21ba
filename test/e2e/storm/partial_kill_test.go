//go:build unix

package storm

import "testing"

// The permit server is killed after the warm-up, late enough before the end
// of the load that the killed replica's leases end and the new one lends
// while calls still arrive, and the new replica gets the slice before its
// learning ends, so that its learning is what the run sees.
func TestBrokerKillSchedule(t *testing.T) {
	if BrokerKillAt <= PartialWarmup {
		t.Errorf("the kill at %v is inside the warm-up of %v", BrokerKillAt, PartialWarmup)
	}
	if BrokerKillAt+2*PartialMaxLease >= BrokerKillDuration {
		t.Errorf("the kill at %v leaves less than two leases of %v before the end at %v", BrokerKillAt, PartialMaxLease, BrokerKillDuration)
	}
	if BrokerKillUnacknowledgedDelay >= PartialMaxLease {
		t.Errorf("the slice moves after %v, not within the new replica's learning of %v", BrokerKillUnacknowledgedDelay, PartialMaxLease)
	}
	if s := BrokerKillSpec(); s.Handover.UnacknowledgedDelay == nil || s.Handover.UnacknowledgedDelay.Duration != BrokerKillUnacknowledgedDelay || s.Reserve == nil {
		t.Errorf("the kill run's quota: %+v", s)
	}
}
