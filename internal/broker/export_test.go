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

// LenderOf names the ask that lent the offered lease id of gate: the tests
// match a borrower's lease with the pod's permit. ok is false for a lease
// of the reserve or one that has ended.
func (b *Broker) LenderOf(gate string, id uint64) (ask uint64, ok bool) {
	p := b.pool(gate)
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.offered[id]; l != nil {
		return l.ask, true
	}
	return 0, false
}

// PendingAsks is the asks of gate's offering pods not answered yet, those
// given up included: the tests check that none is left behind.
func (b *Broker) PendingAsks(gate string) int {
	p := b.pool(gate)
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for o := range p.offerings {
		n += len(o.pending)
	}
	return n
}
