package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/fifo"
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

// LendRules say how a gate uses its Lender beyond the rule SetLender
// describes. The zero value is that rule alone.
type LendRules struct {
	// ReturnEarly returns a loan as soon as the gate has a permit of its
	// own free for its call, rather than when the call ends: a permit of
	// the gate that a release or a larger limit frees, with no call waiting
	// for it, goes to the oldest call running on a lent permit, which goes
	// on on it, and the lent permit goes back to the Lender at once. The
	// reserve's permits then serve the pods' peaks only while they last, so
	// the same reserve admits more calls; more calls borrow, because its
	// permits are free more often. The loan still counts in
	// Stats.Borrowed, and the call now counts in InFlight (it holds one of
	// the gate's permits); Stats.ReturnedEarly counts such loans.
	ReturnEarly bool
	// AskAfter is how long a call that has a place in the waiting room
	// waits there for one of the gate's own permits before it asks the
	// Lender too: a permit of its own pod that frees within AskAfter serves
	// it without a loan, so fewer calls borrow, at the price of a reserve
	// permit that frees meanwhile going to another pod's call. Zero asks at
	// once; a call whose wait is bounded by AskAfter or less asks at once
	// too, so AskAfter never sheds a call that would have borrowed. A call
	// without a place in the room asks at once.
	AskAfter time.Duration
}

// Validate reports a negative AskAfter.
func (r LendRules) Validate() error {
	if r.AskAfter < 0 {
		return fmt.Errorf("gate: lend rules: AskAfter must not be negative, got %s", r.AskAfter)
	}
	return nil
}

// lenderRef holds a Lender and its rules for an atomic.Pointer.
type lenderRef struct {
	Lender
	rules LendRules
}

// loanHold is what a Gate that stands for a lent permit holds (see
// lentPermit).
type loanHold struct {
	loan Loan
	// owner is the gate whose call holds the loan.
	owner *Gate
	// movable is set when the loan may move to one of owner's permits
	// (LendRules.ReturnEarly); it is then in owner.loans until it moves
	// or ends.
	movable bool
	// entry is the loan's place in owner.loans; guarded by owner.mu. A
	// movable loan whose entry is nil has moved: the call holds one of
	// owner's permits and the loan has gone back.
	entry *fifo.Entry[*Gate]
}

// lentPermit returns what a Permit holding loan for a call of g points to.
// A Permit is one pointer to a Gate, so that returning it from Acquire and
// releasing it costs the local path nothing more than a semaphore's; a
// lent permit points to a Gate of its own that stands for the loan: its
// admission word has the queued bit set and one call in flight, so
// Release's atomic decrement takes the slow path, where releaseSlow ends
// the loan (endLoan). It allocates, on the borrowing path only, beside a
// round trip to the Lender.
//
// Under LendRules.ReturnEarly the loan is kept in g.loans, which sets g's
// queued bit so that every release of g takes the slow path, where
// dispatchLocked moves the loan's call to the permit freed; one may be
// free already, and then the loan goes back at once.
func (g *Gate) lentPermit(loan Loan, returnEarly bool) *Gate {
	lg := &Gate{state: queuedBit | 1, lent: &loanHold{loan: loan, owner: g, movable: returnEarly}}
	g.lentInFlight.Add(1)
	if returnEarly {
		g.mu.Lock()
		e := g.loans.New()
		e.Value = lg
		g.loans.PushBack(e)
		lg.lent.entry = e
		g.setQueuedLocked()
		g.dispatchLocked()
		g.mu.Unlock()
	}
	return lg
}

// moveLoanLocked moves the oldest call of g running on a lent permit to a
// permit of g's that the caller has just taken for it (admitLocked), and
// returns the loan.
func (g *Gate) moveLoanLocked() {
	e := g.loans.PopFront()
	h := e.Value.lent
	e.Value = nil
	g.loans.Recycle(e)
	h.entry = nil
	g.lentInFlight.Add(-1)
	g.returnedEarly.Add(1)
	// Return does not block for a round trip (Loan says so), so it may run
	// under the mutex.
	h.loan.Return()
}

// endLoan ends the loan that g stands for, as its call ends: it returns
// the loan, or, when the call has moved to a permit of the owner's, that
// permit.
func (g *Gate) endLoan() {
	h := g.lent
	o := h.owner
	if h.movable {
		o.mu.Lock()
		e := h.entry
		if e == nil { // moved
			o.mu.Unlock()
			o.release()
			return
		}
		o.loans.Remove(e)
		e.Value = nil
		o.loans.Recycle(e)
		h.entry = nil
		o.clearQueuedIfIdleLocked()
		o.mu.Unlock()
	}
	o.lentInFlight.Add(-1)
	h.loan.Return()
}

// SetLender makes g borrow from l, or stop borrowing when l is nil, by the
// rule below alone: SetLenderRules with the zero LendRules.
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
	// The zero LendRules are valid.
	_ = g.SetLenderRules(l, LendRules{})
}

// SetLenderRules makes g borrow from l as SetLender says, and by r (see
// LendRules), or stop borrowing when l is nil. It returns r's error and
// changes nothing when r is invalid. Calls that hold lent permits when the
// rules change keep the rules they borrowed under.
func (g *Gate) SetLenderRules(l Lender, r LendRules) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if l == nil {
		g.lender.Store(nil)
		return nil
	}
	g.lender.Store(&lenderRef{Lender: l, rules: r})
	return nil
}

// lendNow asks the Lender, if any, for a permit for a call that the
// waiting room cannot take, waiting up to wait for one, and returns what
// the call's Permit on it points to (lentPermit); nil when none is lent.
func (g *Gate) lendNow(ctx context.Context, deadline time.Time, hasDeadline bool, wait time.Duration) *Gate {
	ref, hold := g.lenderFor(deadline, hasDeadline)
	if ref == nil {
		return nil
	}
	loan, err := ref.Lend(ctx, hold, min(wait, hold))
	if !g.countLend(ctx, loan, err) {
		return nil
	}
	g.borrowed.Add(1)
	return g.lentPermit(loan, ref.rules.ReturnEarly)
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
	case errors.Is(err, errNotAsked):
	case errors.Is(err, ErrNotLent):
		g.notLent.Add(1)
	case ctx.Err() == nil:
		g.lendFailed.Add(1)
	}
	return false
}

// errNotAsked is a lending's outcome when the call's time ran out before
// AskAfter did: neither a refusal nor a failure of the Lender.
var errNotAsked = errors.New("gate: the Lender was not asked")

// lending is a Lend running beside a call's wait in the waiting room.
type lending struct {
	result      chan lent // receives the one outcome
	cancel      context.CancelFunc
	returnEarly bool // the rules' ReturnEarly when it started
}

type lent struct {
	loan Loan
	err  error
}

// startLending asks the Lender, if any, for a permit for a call that is
// about to wait up to wait in the waiting room, after the rules' AskAfter
// when the wait is longer; nil when there is no Lender or the call has no
// deadline.
func (g *Gate) startLending(ctx context.Context, deadline time.Time, hasDeadline bool, wait time.Duration) *lending {
	ref, _ := g.lenderFor(deadline, hasDeadline)
	if ref == nil {
		return nil
	}
	ask := ref.rules.AskAfter
	if wait <= ask {
		ask = 0
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &lending{result: make(chan lent, 1), cancel: cancel, returnEarly: ref.rules.ReturnEarly}
	go func() {
		if ask > 0 {
			t := time.NewTimer(ask)
			select {
			case <-t.C:
			case <-lctx.Done():
				t.Stop()
				l.result <- lent{err: lctx.Err()}
				return
			}
		}
		hold := time.Until(deadline)
		if hold <= 0 {
			l.result <- lent{err: errNotAsked}
			return
		}
		loan, err := ref.Lend(lctx, hold, min(wait-ask, hold))
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
