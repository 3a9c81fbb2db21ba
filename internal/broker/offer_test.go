package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// offerBroker is newBroker with an ask timeout: long where the test
// answers every ask itself, short where it lets one go unanswered.
func offerBroker(t *testing.T, capacity int, askTimeout time.Duration) (*broker.Broker, *clocktesting.FakePassiveClock) {
	t.Helper()
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, Margin: margin, MaxWait: 5 * time.Second, OfferAskTimeout: askTimeout, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapacity("g", capacity); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(b.LearningUntil())
	return b, clock
}

// offer opens pod's offering of gate g, closed when the test ends.
func offer(t *testing.T, b *broker.Broker, pod string, spare int) *broker.Offering {
	t.Helper()
	o, err := b.Offer("g", pod, spare)
	if err != nil {
		t.Fatalf("offer of %s: %v", pod, err)
	}
	t.Cleanup(o.Close)
	return o
}

// next is the next message for o's pod, within ten seconds.
func next(t *testing.T, o *broker.Offering) broker.OfferAsk {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := o.Next(ctx)
	if err != nil {
		t.Fatalf("the next message for %s: %v", o.Pod(), err)
	}
	return m
}

// nothingFor fails if a message for o's pod is queued now.
func nothingFor(t *testing.T, o *broker.Offering) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if m, err := o.Next(ctx); err == nil {
		t.Fatalf("%s was sent %+v, want nothing", o.Pod(), m)
	}
}

type borrowed struct {
	lease broker.Lease
	err   error
}

// borrowAsync borrows for pod in a goroutine, with a ticket when not 0.
func borrowAsync(ctx context.Context, b *broker.Broker, pod string, ticket uint64, wait time.Duration) <-chan borrowed {
	done := make(chan borrowed, 1)
	go func() {
		l, err := b.Borrow(ctx, broker.Request{Gate: "g", Pod: pod, Hold: time.Second, Wait: wait, Ticket: ticket})
		done <- borrowed{l, err}
	}()
	return done
}

func result(t *testing.T, what string, ch <-chan borrowed) borrowed {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer after 10s", what)
		return borrowed{}
	}
}

// wantAsk fails unless m asks for a permit for a lease of hold 1s.
func wantAsk(t *testing.T, pod string, m broker.OfferAsk) uint64 {
	t.Helper()
	if m.Ask == 0 || m.Release != 0 || m.TTL != time.Second+margin {
		t.Fatalf("%s was sent %+v, want an ask with the lease's ttl %s", pod, m, time.Second+margin)
	}
	return m.Ask
}

// TestAnOfferServesABorrow: with the reserve lent out, a borrow is lent a
// permit of the offering pod with the most spare, never of its own pod's;
// the lease is returned like any other, and its permit released at the
// pod once.
func TestAnOfferServesABorrow(t *testing.T) {
	b, _ := offerBroker(t, 1, 10*time.Second)
	reserve := mustBorrow(t, b, "a")
	own := offer(t, b, "x", 9)
	small := offer(t, b, "small", 1)
	big := offer(t, b, "big", 2)

	done := borrowAsync(context.Background(), b, "x", 0, 0)
	id := wantAsk(t, "big", next(t, big))
	nothingFor(t, own)
	nothingFor(t, small)
	big.Answer(id, true, 1)
	r := result(t, "the borrow", done)
	if r.err != nil {
		t.Fatalf("borrow with an offer granted: %v", r.err)
	}
	if r.lease.ID == 0 || r.lease.ID == reserve.ID || r.lease.Incarnation != b.Incarnation() || r.lease.TTL != time.Second+margin {
		t.Errorf("lease %+v: want a new id of incarnation %d lasting hold + margin", r.lease, b.Incarnation())
	}
	s := stats(t, b)
	if s.Leases != 1 || s.OfferedLeases != 1 || s.OfferingPods != 3 || s.OffersGranted != 1 || s.OffersRefused != 0 || s.OffersTimedOut != 0 {
		t.Errorf("stats %+v: want the reserve's lease, one offered, three pods offering, one offer granted", s)
	}
	for _, c := range b.Borrowers() {
		if c.Pod == "x" && c.Granted != 1 {
			t.Errorf("borrower %+v: an offered lease is a grant", c)
		}
	}

	if !b.Return("g", r.lease.Incarnation, r.lease.ID) {
		t.Fatal("returning the offered lease: false")
	}
	if m := next(t, big); m != (broker.OfferAsk{Release: id}) {
		t.Fatalf("big was sent %+v after the return, want the release of ask %d", m, id)
	}
	if b.Return("g", r.lease.Incarnation, r.lease.ID) {
		t.Error("a second return of the offered lease: true")
	}
	nothingFor(t, big)
	if s := stats(t, b); s.Leases != 1 || s.OfferedLeases != 0 || s.Returned != 1 {
		t.Errorf("stats %+v: want the reserve's lease only, one returned", s)
	}
}

// TestRefusingPodsAreSkipped: a pod that refuses sends the borrow to the
// next; a pod with no spare is not asked; when none grants, the borrow
// waits for the reserve as before and is lent its next permit.
func TestRefusingPodsAreSkipped(t *testing.T) {
	b, _ := offerBroker(t, 1, 10*time.Second)
	reserve := mustBorrow(t, b, "a")
	first := offer(t, b, "first", 3)
	second := offer(t, b, "second", 2)
	none := offer(t, b, "none", 0)

	done := borrowAsync(context.Background(), b, "x", 0, 0)
	first.Answer(wantAsk(t, "first", next(t, first)), false, 0)
	id := wantAsk(t, "second", next(t, second))
	second.Answer(id, true, 1)
	if r := result(t, "the borrow", done); r.err != nil {
		t.Fatalf("borrow with the second pod granting: %v", r.err)
	}

	// First said it has no spare now: second is asked, and refuses; the
	// borrow waits for the reserve.
	done = borrowAsync(context.Background(), b, "y", 0, 5*time.Second)
	second.Answer(wantAsk(t, "second", next(t, second)), false, 0)
	waitFor(t, "the borrow waits for the reserve", func() bool { return stats(t, b).Waiting == 1 })
	nothingFor(t, first)
	nothingFor(t, none)
	b.Return("g", reserve.Incarnation, reserve.ID)
	if r := result(t, "the waiting borrow", done); r.err != nil {
		t.Fatalf("the waiting borrow once the reserve's permit came back: %v", r.err)
	}
	if s := stats(t, b); s.Leases != 1 || s.OfferedLeases != 1 || s.OffersGranted != 1 || s.OffersRefused != 2 {
		t.Errorf("stats %+v: want one lease of each kind, one offer granted and two refused", s)
	}

	// With no spare anywhere, a borrow that does not wait is refused at
	// once, asking nobody.
	_, err := borrow(b, "z")
	wantRefusal(t, err, reservev1.Reason_REASON_EXHAUSTED)
	nothingFor(t, first)
	nothingFor(t, second)
}

// TestUnansweredAsks: an ask with no answer within the ask timeout sends
// the borrow on to the next pod, and a grant that comes after it is
// released at once; so is a grant for a borrow whose caller left.
func TestUnansweredAsks(t *testing.T) {
	b, _ := offerBroker(t, 0, 20*time.Millisecond)
	slow := offer(t, b, "slow", 5)
	quick := offer(t, b, "quick", 1)

	done := borrowAsync(context.Background(), b, "x", 0, 0)
	late := wantAsk(t, "slow", next(t, slow))
	quick.Answer(wantAsk(t, "quick", next(t, quick)), true, 0)
	if r := result(t, "the borrow", done); r.err != nil {
		t.Fatalf("borrow with the first pod silent: %v", r.err)
	}
	slow.Answer(late, true, 4)
	if m := next(t, slow); m != (broker.OfferAsk{Release: late}) {
		t.Fatalf("slow was sent %+v after its late grant, want its release", m)
	}
	slow.Answer(late, true, 4) // a repeated answer is ignored
	nothingFor(t, slow)

	// The borrow's caller leaves while slow has not answered (the ask
	// timeout is long).
	b2, _ := offerBroker(t, 0, 10*time.Second)
	slow = offer(t, b2, "slow", 5)
	ctx, cancel := context.WithCancel(context.Background())
	done = borrowAsync(ctx, b2, "x", 0, 0)
	id := wantAsk(t, "slow", next(t, slow))
	cancel()
	if r := result(t, "the canceled borrow", done); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a borrow whose caller left during the ask: %v, want context.Canceled", r.err)
	}
	slow.Answer(id, true, 4)
	if m := next(t, slow); m != (broker.OfferAsk{Release: id}) {
		t.Fatalf("slow was sent %+v after granting a borrow whose caller left, want its release", m)
	}
	if s := b2.Stats()[0]; s.OfferedLeases != 0 || s.OffersTimedOut != 1 || s.OffersGranted != 0 {
		t.Errorf("stats %+v: want no lease and the ask counted as timed out", s)
	}
	if n := b2.PendingAsks("g"); n != 0 {
		t.Errorf("%d asks pending after every one was answered", n)
	}
}

// TestStreamEndsMidAsk: an offering that closes while its pod is asked
// sends the borrow on to the next pod at once; a lease lent from a pod
// whose stream has ended is returned, and nothing is sent for it.
func TestStreamEndsMidAsk(t *testing.T) {
	b, _ := offerBroker(t, 0, 10*time.Second)
	gone := offer(t, b, "gone", 5)
	stays := offer(t, b, "stays", 1)

	done := borrowAsync(context.Background(), b, "x", 0, 0)
	wantAsk(t, "gone", next(t, gone))
	gone.Close()
	stays.Answer(wantAsk(t, "stays", next(t, stays)), true, 0)
	r := result(t, "the borrow", done)
	if r.err != nil {
		t.Fatalf("borrow whose first pod's stream ended: %v", r.err)
	}
	if _, err := gone.Next(context.Background()); !errors.Is(err, broker.ErrOfferEnded) {
		t.Errorf("Next of a closed offering: %v, want ErrOfferEnded", err)
	}
	stays.Close()
	if !b.Return("g", r.lease.Incarnation, r.lease.ID) {
		t.Error("returning a lease lent from a pod whose stream ended: false")
	}
	if s := stats(t, b); s.OfferingPods != 0 || s.OfferedLeases != 0 || s.OffersTimedOut != 1 || s.OffersGranted != 1 {
		t.Errorf("stats %+v: want no pod offering, nothing lent, one ask timed out and one granted", s)
	}
}

// TestWithdrawOfferedLeases: a Return by ticket ends an offered lease and
// releases its permit once; one that comes while the borrow asks
// withdraws it at once, and the pod's grant after it is released.
func TestWithdrawOfferedLeases(t *testing.T) {
	b, _ := offerBroker(t, 0, 10*time.Second)
	pod := offer(t, b, "pod", 5)

	done := borrowAsync(context.Background(), b, "x", 11, 0)
	id := wantAsk(t, "pod", next(t, pod))
	pod.Answer(id, true, 4)
	r := result(t, "the ticketed borrow", done)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !b.Withdraw("g", 11) {
		t.Fatal("Withdraw of an offered lease's ticket: false")
	}
	if m := next(t, pod); m != (broker.OfferAsk{Release: id}) {
		t.Fatalf("pod was sent %+v, want the release of ask %d", m, id)
	}
	if b.Withdraw("g", 11) || b.Return("g", r.lease.Incarnation, r.lease.ID) {
		t.Error("the withdrawn lease ended again")
	}
	nothingFor(t, pod)

	done = borrowAsync(context.Background(), b, "x", 12, 0)
	id = wantAsk(t, "pod", next(t, pod))
	if !b.Withdraw("g", 12) {
		t.Fatal("Withdraw of a borrow asking a pod: false")
	}
	wantRefusal(t, result(t, "the withdrawn borrow", done).err, reservev1.Reason_REASON_WITHDRAWN)
	pod.Answer(id, true, 4)
	if m := next(t, pod); m != (broker.OfferAsk{Release: id}) {
		t.Fatalf("pod was sent %+v after granting a withdrawn borrow, want its release", m)
	}
	if s := stats(t, b); s.OfferedLeases != 0 || s.Returned != 1 {
		t.Errorf("stats %+v: want nothing lent, one lease returned", s)
	}
}

// TestOfferedLeasesApart: offered leases are not the reserve's: they do not
// count against the capacity, SetCapacity does not touch them, and one
// that expires is only forgotten (its pod has let its permit go).
func TestOfferedLeasesApart(t *testing.T) {
	b, clock := offerBroker(t, 1, 10*time.Second)
	mustBorrow(t, b, "a")
	pod := offer(t, b, "pod", 1)
	done := borrowAsync(context.Background(), b, "x", 0, 0)
	pod.Answer(wantAsk(t, "pod", next(t, pod)), true, 0)
	r := result(t, "the borrow", done)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := b.SetCapacity("g", 2); err != nil {
		t.Fatal(err)
	}
	mustBorrow(t, b, "b") // the offered lease takes no room in the reserve
	if err := b.SetCapacity("g", 0); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, b); s.Leases != 2 || s.OfferedLeases != 1 {
		t.Fatalf("stats %+v: want two leases of the reserve and the offered one, whatever the capacity", s)
	}
	clock.SetTime(clock.Now().Add(r.lease.TTL))
	b.Expire()
	if s := stats(t, b); s.OfferedLeases != 0 || s.Expired != 3 {
		t.Errorf("stats %+v: want every lease expired", s)
	}
	nothingFor(t, pod)
	if b.Return("g", r.lease.Incarnation, r.lease.ID) {
		t.Error("an expired offered lease was returned")
	}
}

// TestNoAsksWhileLearning: a restarted server lends nothing, and so asks
// no pod, while it learns.
func TestNoAsksWhileLearning(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, OfferAskTimeout: 10 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 0)
	pod := offer(t, b, "pod", 5)
	_, err = borrow(b, "x")
	wantRefusal(t, err, reservev1.Reason_REASON_LEARNING)
	nothingFor(t, pod)
	if s := stats(t, b); s.OfferingPods != 1 || s.OffersGranted+s.OffersRefused+s.OffersTimedOut != 0 {
		t.Errorf("stats %+v: want the pod offering and never asked", s)
	}
}

// TestOfferRefused: an offer names its gate and pod, of a gate held here;
// a server shutting down ends every offering and takes no new one.
func TestOfferRefused(t *testing.T) {
	b, _ := offerBroker(t, 1, 0)
	if _, err := b.Offer("", "", 1); !errors.Is(err, broker.ErrInvalid) || !strings.HasSuffix(err.Error(), "gate: must not be empty; pod: must not be empty") {
		t.Errorf("an offer naming nothing: %v, want ErrInvalid naming the fields", err)
	}
	if _, err := b.Offer("other", "p", 1); !errors.Is(err, broker.ErrUnknownGate) || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("an offer of an unknown gate: %v, want ErrUnknownGate naming it", err)
	}
	o := offer(t, b, "p", 1)
	b.CloseOffers()
	if _, err := o.Next(context.Background()); !errors.Is(err, broker.ErrOfferEnded) {
		t.Errorf("Next after CloseOffers: %v, want ErrOfferEnded", err)
	}
	if _, err := b.Offer("g", "q", 1); !errors.Is(err, broker.ErrOfferEnded) {
		t.Errorf("an offer after CloseOffers: %v, want ErrOfferEnded", err)
	}
	if s := stats(t, b); s.OfferingPods != 0 {
		t.Errorf("stats %+v: want no pod offering", s)
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
