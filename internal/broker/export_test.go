package broker

// OnGrant calls f under the gate's lock after every grant, with the leases
// outstanding and the capacity in force: the stress tests check the
// invariant at the instant it must hold. The gate must exist.
func (b *Broker) OnGrant(gate string, f func(leases, capacity int)) {
	p := b.pool(gate)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onGrant = f
}
