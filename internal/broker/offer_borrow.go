package broker

import (
	"context"
	"time"
)

// This file holds the borrow's side of offers: a borrow that finds the
// reserve lent out asks the gate's offering pods, one at a time, for one
// of their own idle permits.

// borrowOfferedLocked asks the offering pods of r's gate, other than the
// borrower's own, for a permit, most spare first, at most
// Options.OfferAsks of them, each for at most Options.OfferAskTimeout and
// all within ctx. It reports answered when the borrow has its answer: the
// lease a pod granted, a reserve permit that came back meanwhile, or the
// borrow's end (withdrawn, or ctx done). Not answered, the borrow goes on
// to wait for the reserve. p.mu is held on entry and on return; it is
// released while an answer is awaited.
func (b *Broker) borrowOfferedLocked(ctx context.Context, p *pool, r Request, ttl time.Duration) (_ Lease, answered bool, _ error) {
	if len(p.offerings) == 0 {
		return Lease{}, false, nil
	}
	as := &asker{}
	if r.Ticket != 0 {
		p.asking[r.Ticket] = as
		defer delete(p.asking, r.Ticket)
	}
	tried := map[*Offering]bool{}
	for range b.opts.OfferAsks {
		o := p.offererLocked(r.Pod, tried)
		if o == nil {
			break
		}
		tried[o] = true
		a := o.askLocked(r.Pod, r.Ticket, ttl, b.clock.Now())
		as.current = a
		p.mu.Unlock()
		timer := time.NewTimer(b.opts.OfferAskTimeout)
		select {
		case <-a.done:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		p.mu.Lock()
		as.current = nil
		p.abandonLocked(a) // no answer came in time; a no-op when one did
		now := b.clock.Now()
		if l := a.lease; l != nil {
			switch {
			case p.offered[l.id] != l:
				// A Return by the borrow's ticket ended the lease
				// between the grant and now.
				return Lease{}, true, b.withdrawn()
			case ctx.Err() != nil:
				// The caller is gone and will never return it: release
				// the pod's permit now rather than at its ttl.
				p.returnLocked(l)
				return Lease{}, true, ctx.Err()
			}
			return b.leaseOf(l, ttl), true, nil
		}
		switch {
		case as.withdrawn:
			return Lease{}, true, b.withdrawn()
		case ctx.Err() != nil:
			p.tallyLocked(r.Pod, now).refused++
			return Lease{}, true, ctx.Err()
		}
		p.expireLocked(now)
		if p.freeLocked() && p.waiting.Len() == 0 {
			// A permit of the reserve came back while the pod answered.
			return b.leaseOf(p.grantLocked(r.Pod, r.Ticket, now, ttl), ttl), true, nil
		}
	}
	return Lease{}, false, nil
}

// offererLocked is the offering pod to ask next for borrower: not the
// borrower itself nor one tried, with the most spare, less the asks it has
// not answered yet (those may take its spare, and a pod that does not
// answer falls behind), and some spare left. Pods with as much spare are
// taken in no fixed order, which spreads the asks. It returns nil when no
// pod is left.
func (p *pool) offererLocked(borrower string, tried map[*Offering]bool) *Offering {
	var best *Offering
	bestSpare := 0
	for o := range p.offerings {
		if o.pod == borrower || tried[o] {
			continue
		}
		if s := o.spare - len(o.pending); s > bestSpare {
			best, bestSpare = o, s
		}
	}
	return best
}
