package gate

import (
	"context"
	"errors"
	"time"
)

// Lender lends a gate permits beyond its own: the permits of a reserve
// pooled over the pods, lent per call by a permit server (package reserve
// in this module is the gRPC one). A gate with a Lender borrows only when
// its own permits are all taken, for a call that has a deadline; see
// SetLender.
type Lender interface {
	// Lend lends one permit for a call that will hold it at most hold,
	// waiting up to wait for one when none is free (0: answer at once). It
	// returns the permit's Loan; ErrNotLent (errors.Is) when there is none
	// to lend within wait; any other error when the lender could not be
	// asked or did not answer in time. It returns ctx.Err() when ctx ends
	// first. Lend must keep within its own time budget: the gate's calls
	// wait for it.
	Lend(ctx context.Context, hold, wait time.Duration) (Loan, error)
}

// Loan is one lent permit.
type Loan interface {
	// Return gives the permit back. It is called once, when the call ends,
	// and must not block the caller for a round trip.
	Return()
}

// ErrNotLent is matched by a Lender's error when it had no permit to lend.
var ErrNotLent = errors.New("gate: no permit lent")

// lenderRef holds a Lender for an atomic.Pointer.
type lenderRef struct{ Lender }

// lentPermit returns a Permit holding loan. A Permit is one pointer to a
// Gate, so that returning it from Acquire and releasing it costs the local
// path nothing more than a semaphore's; a lent permit points to a Gate of
// its own that stands for the loan: its admission word has the queued bit
// set and one call in flight, so Release's atomic decrement takes the slow
// path, where releaseSlow returns the loan. It allocates, on the borrowing
// path only, beside a round trip to the Lender.
func lentPermit(loan Loan) Permit {
	return Permit{g: &Gate{state: queuedBit | 1, loan: loan}}
}

// SetLender makes g borrow from l, or stop borrowing when l is nil.
//
// A call that finds every permit of the gate taken, and has a deadline,
// borrows before it is shed or while it waits. When it waits in the
// waiting room, it asks l at the same time, to wait for a lent permit as
// long as it waits for one of the gate's, and takes whichever comes first,
// giving the other back. When the waiting room has no place for it, it
// asks l for a permit, waiting for one as long as the waiting room would
// have kept it (the bound of MaxQueueWait, AcquireTimeout and the
// deadline; nothing when none bounds it), and is admitted on the loan or
// rejected with QueueFull as before. So a call is kept no longer than a
// call in the waiting room is, and the permits going back to the reserve
// within a wait serve the calls of every pod whose own permits and room
// are taken, in the order they asked, as one gate's waiting room would.
// Beyond that, a call waits only for the time l takes to answer (l's
// budget). TryAcquire never borrows.
//
// A lent permit is not one of the gate's: it does not count in InFlight or
// Stats.InFlight and Admitted (Stats.Borrowed counts it), and its Permit's
// Release returns it to the Lender.
func (g *Gate) SetLender(l Lender) {
	if l == nil {
		g.lender.Store(nil)
		return
	}
	g.lender.Store(&lenderRef{l})
}

// lendNow asks the Lender, if any, for a permit for a call that the
// waiting room cannot take, waiting up to wait for one; nil when none is
// lent.
func (g *Gate) lendNow(ctx context.Context, deadline time.Time, hasDeadline bool, wait time.Duration) Loan {
	ref, hold := g.lenderFor(deadline, hasDeadline)
	if ref == nil {
		return nil
	}
	loan, err := ref.Lend(ctx, hold, min(wait, hold))
	if !g.countLend(ctx, loan, err) {
		return nil
	}
	g.borrowed.Add(1)
	return loan
}

// lenderFor returns the Lender to ask for a call with that deadline, and
// the call's remaining time; nil when there is no Lender, or no deadline
// to bound a lease by.
func (g *Gate) lenderFor(deadline time.Time, hasDeadline bool) (*lenderRef, time.Duration) {
	ref := g.lender.Load()
	if ref == nil || !hasDeadline {
		return nil, 0
	}
	hold := time.Until(deadline)
	if hold <= 0 {
		return nil, 0
	}
	return ref, hold
}

// countLend reports whether a Lend lent, and counts it when it did not: a
// refusal, or a failure of the Lender. A Lend that ended with the call's
// own context is neither, and is not counted. The caller counts a loan it
// uses.
func (g *Gate) countLend(ctx context.Context, loan Loan, err error) bool {
	switch {
	case err == nil && loan != nil:
		return true
	case errors.Is(err, ErrNotLent):
		g.notLent.Add(1)
	case ctx.Err() == nil:
		g.lendFailed.Add(1)
	}
	return false
}

// lending is a Lend running beside a call's wait in the waiting room.
type lending struct {
	result chan lent // receives the one outcome
	cancel context.CancelFunc
}

type lent struct {
	loan Loan
	err  error
}

// startLending asks the Lender, if any, for a permit for a call that is
// about to wait up to wait in the waiting room; nil when there is no
// Lender or the call has no deadline.
func (g *Gate) startLending(ctx context.Context, deadline time.Time, hasDeadline bool, wait time.Duration) *lending {
	ref, hold := g.lenderFor(deadline, hasDeadline)
	if ref == nil {
		return nil
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &lending{result: make(chan lent, 1), cancel: cancel}
	go func() {
		loan, err := ref.Lend(lctx, hold, min(wait, hold))
		l.result <- lent{loan, err}
	}()
	return l
}

// abandon stops a lending whose outcome the call no longer wants, giving
// back a permit lent meanwhile.
func (l *lending) abandon() {
	l.cancel()
	go func() {
		if r := <-l.result; r.err == nil && r.loan != nil {
			r.loan.Return()
		}
	}()
}
