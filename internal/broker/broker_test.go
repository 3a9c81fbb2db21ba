package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	maxLease = 10 * time.Second
	margin   = 100 * time.Millisecond
)

// newBroker returns a Broker on a fake clock, past its learning time, with
// gate "g" of capacity.
func newBroker(t *testing.T, capacity int) (*broker.Broker, *clocktesting.FakePassiveClock) {
	t.Helper()
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, Margin: margin, MaxWait: 5 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetCapacity("g", capacity); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(b.LearningUntil())
	return b, clock
}

func borrow(b *broker.Broker, pod string) (broker.Lease, error) {
	return b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: pod, Hold: time.Second})
}

func mustBorrow(t *testing.T, b *broker.Broker, pod string) broker.Lease {
	t.Helper()
	l, err := borrow(b, pod)
	if err != nil {
		t.Fatalf("borrow by %s: %v", pod, err)
	}
	return l
}

// wantRefusal fails unless err refuses for reason, and returns its
// RetryAfter.
func wantRefusal(t *testing.T, err error, reason reservev1.Reason) time.Duration {
	t.Helper()
	var r *broker.Refusal
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("got %v, want a refusal %s", err, reason)
	}
	return r.RetryAfter
}

func stats(t *testing.T, b *broker.Broker) broker.GateStats {
	t.Helper()
	s := b.Stats()
	if len(s) != 1 {
		t.Fatalf("stats %+v: want one gate", s)
	}
	return s[0]
}

func TestBorrowUpToTheCapacity(t *testing.T) {
	b, _ := newBroker(t, 2)
	x, y := mustBorrow(t, b, "pod-a"), mustBorrow(t, b, "pod-b")
	if x.ID == y.ID || x.Incarnation != b.Incarnation() || x.TTL != time.Second+margin {
		t.Errorf("leases %+v and %+v: want distinct ids of incarnation %d lasting hold + margin", x, y, b.Incarnation())
	}
	_, err := borrow(b, "pod-c")
	wantRefusal(t, err, reservev1.Reason_REASON_EXHAUSTED)

	if !b.Return("g", x.Incarnation, x.ID) {
		t.Fatal("returning a lease outstanding: false")
	}
	if b.Return("g", x.Incarnation, x.ID) {
		t.Error("returning a lease twice: true the second time")
	}
	if b.Return("g", x.Incarnation+1, y.ID) || b.Return("other", y.Incarnation, y.ID) || b.Return("g", y.Incarnation, y.ID+1) {
		t.Error("a return of another incarnation, another gate or an unknown id ended a lease")
	}
	mustBorrow(t, b, "pod-c")
	if s := stats(t, b); s.Leases != 2 || s.Returned != 1 {
		t.Errorf("stats %+v: want 2 leases, 1 returned", s)
	}
}

// TestLearning: a new Broker lends nothing for the longest lease, says for
// how long, and takes back nothing an earlier run lent.
func TestLearning(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	first, err := broker.New(broker.Options{MaxLease: maxLease, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = first.SetCapacity("g", 1)
	_, err = borrow(first, "pod-a")
	if r := wantRefusal(t, err, reservev1.Reason_REASON_LEARNING); r != maxLease {
		t.Errorf("retry after %s, want the whole longest lease %s", r, maxLease)
	}
	clock.SetTime(t0.Add(maxLease - time.Millisecond))
	_, err = borrow(first, "pod-a")
	if r := wantRefusal(t, err, reservev1.Reason_REASON_LEARNING); r != time.Millisecond {
		t.Errorf("1ms before the end: retry after %s", r)
	}
	clock.SetTime(t0.Add(maxLease))
	old := mustBorrow(t, first, "pod-a")

	// The server restarts: the new run waits out what the first lent.
	restart := clock.Now()
	second, err := broker.New(broker.Options{MaxLease: maxLease, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = second.SetCapacity("g", 1)
	if second.Incarnation() == first.Incarnation() {
		t.Fatal("two runs share an incarnation")
	}
	if second.Return("g", old.Incarnation, old.ID) {
		t.Error("the new run took back the first run's lease")
	}
	clock.SetTime(restart.Add(old.TTL))
	_, err = borrow(second, "pod-b")
	wantRefusal(t, err, reservev1.Reason_REASON_LEARNING)
	clock.SetTime(restart.Add(maxLease))
	mustBorrow(t, second, "pod-b")
}

// TestExpiry: a lease not returned ends at hold + margin after its grant,
// and its permit is lent again, with or without Expire.
func TestExpiry(t *testing.T) {
	b, clock := newBroker(t, 1)
	start := clock.Now()
	l := mustBorrow(t, b, "pod-a")
	clock.SetTime(start.Add(l.TTL - time.Nanosecond))
	b.Expire()
	if s := stats(t, b); s.Leases != 1 {
		t.Fatalf("just before its end: %+v, want the lease outstanding", s)
	}
	_, err := borrow(b, "pod-b")
	wantRefusal(t, err, reservev1.Reason_REASON_EXHAUSTED)
	clock.SetTime(start.Add(l.TTL))
	mustBorrow(t, b, "pod-b") // no Expire: Borrow expires first
	if b.Return("g", l.Incarnation, l.ID) {
		t.Error("an expired lease was returned")
	}
	if s := stats(t, b); s.Leases != 1 || s.Expired != 1 || s.Returned != 0 {
		t.Errorf("stats %+v: want 1 lease, 1 expired", s)
	}
}

func TestRefusals(t *testing.T) {
	b, _ := newBroker(t, 1)
	_, err := b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: "p", Hold: maxLease - margin + time.Nanosecond})
	wantRefusal(t, err, reservev1.Reason_REASON_HOLD_TOO_LONG)
	if _, err := b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: "p", Hold: maxLease - margin}); err != nil {
		t.Errorf("a hold that makes the longest lease: %v", err)
	}
	_, err = b.Borrow(context.Background(), broker.Request{Gate: "other", Pod: "p", Hold: time.Second})
	wantRefusal(t, err, reservev1.Reason_REASON_UNKNOWN_GATE)

	_, err = b.Borrow(context.Background(), broker.Request{Hold: -time.Second, Wait: -1})
	want := "broker: invalid request: gate: must not be empty; pod: must not be empty; hold: must be positive, got -1s; wait: must not be negative, got -1ns"
	if !errors.Is(err, broker.ErrInvalid) || err.Error() != want {
		t.Errorf("malformed request: %v, want %q", err, want)
	}
	if err := b.SetCapacity("g", -1); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "capacity of g: must be at least 0, got -1") {
		t.Errorf("negative capacity: %v", err)
	}
}

// TestShrinkByAttrition: a smaller capacity revokes no lease and lends
// nothing until the leases outstanding are below it.
func TestShrinkByAttrition(t *testing.T) {
	b, _ := newBroker(t, 3)
	leases := []broker.Lease{mustBorrow(t, b, "a"), mustBorrow(t, b, "b"), mustBorrow(t, b, "c")}
	if err := b.SetCapacity("g", 1); err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		if s := stats(t, b); s.Capacity != 1 || s.Leases != 3-i {
			t.Fatalf("after %d returns: %+v, want capacity 1 and %d leases", i, s, 3-i)
		}
		_, err := borrow(b, "d")
		wantRefusal(t, err, reservev1.Reason_REASON_EXHAUSTED)
		b.Return("g", l.Incarnation, l.ID)
	}
	mustBorrow(t, b, "d")
}

// await runs Borrow with a wait in a goroutine and returns its result's
// channel, once the borrow is waiting.
func await(ctx context.Context, t *testing.T, b *broker.Broker, pod string, wait time.Duration) <-chan error {
	t.Helper()
	before := stats(t, b).Waiting
	done := make(chan error, 1)
	go func() {
		_, err := b.Borrow(ctx, broker.Request{Gate: "g", Pod: pod, Hold: time.Second, Wait: wait})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for stats(t, b).Waiting == before {
		if time.Now().After(deadline) {
			t.Fatalf("%s's borrow is not waiting after 10s", pod)
		}
		time.Sleep(time.Millisecond)
	}
	return done
}

func receive(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer after 10s", what)
		return nil
	}
}

// TestWaitingBorrows: waiting borrows are served first come, first served,
// by returns and by a larger capacity.
func TestWaitingBorrows(t *testing.T) {
	b, _ := newBroker(t, 1)
	held := mustBorrow(t, b, "holder")
	first := await(context.Background(), t, b, "first", 5*time.Second)
	second := await(context.Background(), t, b, "second", 5*time.Second)
	b.Return("g", held.Incarnation, held.ID)
	if err := receive(t, "first", first); err != nil {
		t.Fatalf("first waiter after a return: %v", err)
	}
	select {
	case err := <-second:
		t.Fatalf("second waiter served with no permit free: %v", err)
	default:
	}
	if err := b.SetCapacity("g", 2); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, "second", second); err != nil {
		t.Fatalf("second waiter after the capacity grew: %v", err)
	}
	got := map[string]broker.Borrowers{}
	for _, c := range b.Borrowers() {
		got[c.Pod] = c
	}
	if got["first"].Granted != 1 || got["second"].Granted != 1 || got["holder"].Granted != 1 {
		t.Errorf("borrowers %+v: want one grant each", got)
	}
}

// TestWaitEnds: a borrow that gets no permit within its wait (bounded by
// MaxWait) is refused, and one whose caller goes away leaves nothing
// behind.
func TestWaitEnds(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, MaxWait: 30 * time.Millisecond, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 0)
	clock.SetTime(b.LearningUntil())

	start := time.Now()
	_, err = b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: "p", Hold: time.Second, Wait: time.Hour})
	wantRefusal(t, err, reservev1.Reason_REASON_EXHAUSTED)
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Errorf("refused after %s, want the whole MaxWait of 30ms", waited)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := await(ctx, t, b, "gone", time.Hour)
	cancel()
	if err := receive(t, "canceled", done); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled borrow: %v, want context.Canceled", err)
	}
	if s := stats(t, b); s.Waiting != 0 || s.Leases != 0 {
		t.Errorf("after the caller left: %+v, want nothing waiting or lent", s)
	}
	if diff := cmp.Diff([]broker.Borrowers{{Gate: "g", Pod: "gone", Refused: 1, LastBorrow: t0.Add(maxLease)}, {Gate: "g", Pod: "p", Refused: 1, LastBorrow: t0.Add(maxLease)}}, b.Borrowers()); diff != "" {
		t.Errorf("borrowers (-want +got):\n%s", diff)
	}
}

// TestBorrowersForgotten: a pod's counts go after PodRetention without a
// borrow.
func TestBorrowersForgotten(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(t0)
	b, err := broker.New(broker.Options{MaxLease: maxLease, PodRetention: time.Minute, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.SetCapacity("g", 2)
	clock.SetTime(b.LearningUntil())
	mustBorrow(t, b, "old")
	clock.SetTime(clock.Now().Add(30 * time.Second))
	mustBorrow(t, b, "new")
	clock.SetTime(clock.Now().Add(31 * time.Second))
	b.Expire()
	if got := b.Borrowers(); len(got) != 1 || got[0].Pod != "new" {
		t.Errorf("borrowers %+v: want only the pod that borrowed within a minute", got)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []broker.Options{
		{MaxLease: time.Second, Margin: time.Second},
		{MaxWait: -time.Second},
	} {
		if _, err := broker.New(o); err == nil {
			t.Errorf("options %+v: no error", o)
		}
	}
}

// Leases counts what is lent now: a returned lease and one whose time is up
// are not; a gate not held has none.
func TestLeasesCountsWhatIsOutstanding(t *testing.T) {
	b, clock := newBroker(t, 3)
	first := mustBorrow(t, b, "a")
	mustBorrow(t, b, "b")
	clock.SetTime(clock.Now().Add(500 * time.Millisecond))
	mustBorrow(t, b, "c")
	if n := b.Leases("g"); n != 3 {
		t.Fatalf("Leases = %d after 3 borrows, want 3", n)
	}
	b.Return("g", first.Incarnation, first.ID)
	if n := b.Leases("g"); n != 2 {
		t.Fatalf("Leases = %d after a return, want 2", n)
	}
	clock.SetTime(clock.Now().Add(time.Second + margin - 500*time.Millisecond)) // b's lease ends; c's has 500ms left
	if n := b.Leases("g"); n != 1 {
		t.Fatalf("Leases = %d once one lease's time was up, want 1", n)
	}
	if n := b.Leases("other"); n != 0 {
		t.Errorf("Leases of a gate not held = %d, want 0", n)
	}
}
