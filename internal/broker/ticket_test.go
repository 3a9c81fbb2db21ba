package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

func borrowTicket(ctx context.Context, b *broker.Broker, pod string, ticket uint64, wait time.Duration) (broker.Lease, error) {
	return b.Borrow(ctx, broker.Request{Gate: "g", Pod: pod, Hold: time.Second, Wait: wait, Ticket: ticket})
}

// TestWithdrawEndsALease: a borrower that gave up on its answer takes the
// borrow back by ticket, and the permit serves the next borrow at once,
// not when the lease's time is up.
func TestWithdrawEndsALease(t *testing.T) {
	b, _ := newBroker(t, 1)
	if _, err := borrowTicket(context.Background(), b, "gave-up", 41, 0); err != nil {
		t.Fatal(err)
	}
	next := await(context.Background(), t, b, "next", 5*time.Second)
	if !b.Withdraw("g", 41) {
		t.Fatal("Withdraw of a granted lease's ticket = false, want true")
	}
	if err := receive(t, "the borrow waiting", next); err != nil {
		t.Fatalf("the borrow waiting, once the lease was taken back: %v", err)
	}
	if b.Withdraw("g", 41) {
		t.Error("a second Withdraw of the same ticket = true, want false")
	}
	if s := stats(t, b); s.Leases != 1 || s.Returned != 1 {
		t.Errorf("stats %+v: want the waiting borrow's lease only, one lease returned", s)
	}
}

// TestWithdrawAWaitingBorrow: a borrow taken back while it waits is
// answered WITHDRAWN and is not lent the next permit.
func TestWithdrawAWaitingBorrow(t *testing.T) {
	b, _ := newBroker(t, 1)
	held := mustBorrow(t, b, "holder")
	done := make(chan error, 1)
	go func() {
		_, err := borrowTicket(context.Background(), b, "gave-up", 7, 5*time.Second)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for stats(t, b).Waiting == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the ticketed borrow is not waiting after 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if !b.Withdraw("g", 7) {
		t.Fatal("Withdraw of a waiting borrow's ticket = false, want true")
	}
	wantRefusal(t, receive(t, "the withdrawn borrow", done), reservev1.Reason_REASON_WITHDRAWN)
	b.Return("g", held.Incarnation, held.ID)
	if s := stats(t, b); s.Waiting != 0 || s.Leases != 0 {
		t.Errorf("stats %+v: the withdrawn borrow must neither wait nor be lent the permit returned", s)
	}
	for _, c := range b.Borrowers() {
		if c.Pod == "gave-up" && (c.Granted != 0 || c.Refused != 0) {
			t.Errorf("borrower %+v: a withdrawn borrow is neither a grant nor demand refused", c)
		}
	}
}

// TestWithdrawBeforeTheBorrow: a Return by ticket that overtakes its
// borrow makes the server refuse the borrow when it arrives, once; and
// the server forgets such tickets after the longest lease.
func TestWithdrawBeforeTheBorrow(t *testing.T) {
	b, clock := newBroker(t, 2)
	if b.Withdraw("g", 9) {
		t.Fatal("Withdraw of a ticket no borrow carried yet = true, want false")
	}
	_, err := borrowTicket(context.Background(), b, "late", 9, 0)
	wantRefusal(t, err, reservev1.Reason_REASON_WITHDRAWN)
	if s := stats(t, b); s.Leases != 0 {
		t.Fatalf("stats %+v: the overtaken borrow must not be lent", s)
	}

	b.Withdraw("g", 10)
	clock.SetTime(clock.Now().Add(maxLease))
	if _, err := borrowTicket(context.Background(), b, "much-later", 10, 0); err != nil {
		t.Errorf("a borrow arriving the longest lease after its ticket was withdrawn: %v, want a lease", err)
	}
	if b.Withdraw("g", 0) || b.Withdraw("unknown", 10) {
		t.Error("Withdraw of ticket 0 or of an unknown gate = true, want false")
	}
}

// TestTicketUsedOnce: a second borrow with the ticket of one outstanding
// is invalid: a Return could not tell the two apart.
func TestTicketUsedOnce(t *testing.T) {
	b, _ := newBroker(t, 2)
	if _, err := borrowTicket(context.Background(), b, "p", 5, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := borrowTicket(context.Background(), b, "p", 5, 0); !errors.Is(err, broker.ErrInvalid) {
		t.Errorf("a second borrow with an outstanding ticket: %v, want ErrInvalid", err)
	}
}

// TestNoLeaseForACallerGone: a borrow whose caller has already given up
// when the server takes it up is not lent, even with a permit free.
func TestNoLeaseForACallerGone(t *testing.T) {
	b, _ := newBroker(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := borrowTicket(ctx, b, "gone", 3, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("borrow with its context done: %v, want context.Canceled", err)
	}
	if s := stats(t, b); s.Leases != 0 {
		t.Errorf("stats %+v: want nothing lent", s)
	}
}

// TestWithdrawnTicketsBounded: the tickets remembered as withdrawn before
// their borrow are bounded; the oldest go first.
func TestWithdrawnTicketsBounded(t *testing.T) {
	b, _ := newBroker(t, 1)
	const n = 4096 + 1
	for ticket := uint64(1); ticket <= n; ticket++ {
		b.Withdraw("g", ticket)
	}
	if _, err := borrowTicket(context.Background(), b, "oldest", 1, 0); err != nil {
		t.Errorf("the oldest of %d tickets withdrawn ahead: %v, want it forgotten and the borrow lent", n, err)
	}
	_, err := borrowTicket(context.Background(), b, "newest", n, 0)
	wantRefusal(t, err, reservev1.Reason_REASON_WITHDRAWN)
}
