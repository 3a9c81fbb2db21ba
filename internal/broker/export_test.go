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

// LenderOf tells what the lease id of gate is: offered (lent from the
// pod's permit that granted ask), of the reserve (ask 0), or ended (live
// false). The tests match a borrower's lease with the pod's permit.
func (b *Broker) LenderOf(gate string, id uint64) (ask uint64, live bool) {
	p := b.pool(gate)
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.leaseLocked(id)
	if l == nil {
		return 0, false
	}
	return l.ask, true
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
