package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/backpressure-dev/backpressure-operator/internal/broker"
)

// FuzzBroker drives a Broker on a fake clock with a sequence of borrows,
// returns (of live, ended, replayed and forged leases), capacity changes
// and clock steps, and checks every answer against a model written from
// the package's documentation: a borrow is lent exactly when the server is
// past learning and fewer leases are live than the capacity in force; a
// return ends exactly a live lease; a lease lives from its grant for hold
// plus margin.
func FuzzBroker(f *testing.F) {
	f.Add([]byte{0, 3, 0, 0, 4, 200, 0, 1, 1, 0, 3, 1, 0, 2, 2, 0})
	f.Add([]byte{4, 255, 4, 255, 0, 9, 0, 9, 3, 0, 1, 0, 0, 1, 4, 90, 5, 0, 0, 3})
	f.Add([]byte{3, 5, 4, 255, 4, 255, 0, 1, 0, 2, 0, 3, 3, 1, 1, 2, 0, 4, 1, 0, 1, 1, 0, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const learning = 2 * time.Second
		clock := clocktesting.NewFakePassiveClock(t0)
		b, err := broker.New(broker.Options{MaxLease: learning, Margin: 10 * time.Millisecond, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		capacity := 2
		_ = b.SetCapacity("g", capacity)
		type modelLease struct {
			lease broker.Lease
			ends  time.Time
			done  bool // returned
		}
		var leases []*modelLease
		live := func() int {
			n := 0
			for _, l := range leases {
				if !l.done && clock.Now().Before(l.ends) {
					n++
				}
			}
			return n
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%6, int(ops[i+1])
			now := clock.Now()
			switch op {
			case 0: // borrow, holding 1..256ms
				hold := time.Duration(arg+1) * time.Millisecond
				want := !now.Before(b.LearningUntil()) && live() < capacity
				l, err := b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: "p", Hold: hold})
				var refusal *broker.Refusal
				switch {
				case want && err != nil:
					t.Fatalf("op %d: borrow refused (%v) with %d live of %d, past learning", i, err, live(), capacity)
				case !want && err == nil:
					t.Fatalf("op %d: borrow lent with %d live of %d (learning until %s, now %s)", i, live(), capacity, b.LearningUntil(), now)
				case err != nil && !errors.As(err, &refusal):
					t.Fatalf("op %d: %v", i, err)
				case err == nil:
					leases = append(leases, &modelLease{lease: l, ends: now.Add(l.TTL)})
				}
			case 1: // return a lease granted before, live or not
				if len(leases) == 0 {
					continue
				}
				l := leases[arg%len(leases)]
				want := !l.done && now.Before(l.ends)
				if got := b.Return("g", l.lease.Incarnation, l.lease.ID); got != want {
					t.Fatalf("op %d: return of a lease (returned %v, ends %s, now %s) = %v", i, l.done, l.ends, now, got)
				}
				l.done = true
			case 2: // forged returns
				if b.Return("g", b.Incarnation(), uint64(arg)) || b.Return("g", b.Incarnation()+1, uint64(arg)) {
					t.Fatalf("op %d: a forged return ended a lease", i)
				}
			case 3: // capacity 0..5
				capacity = arg % 6
				_ = b.SetCapacity("g", capacity)
			case 4: // the clock steps 0..255 × 10ms
				clock.SetTime(now.Add(time.Duration(arg) * 10 * time.Millisecond))
			case 5:
				b.Expire()
				if s := stats(t, b); s.Leases != live() {
					t.Fatalf("op %d: after Expire, %d leases outstanding, the model has %d live", i, s.Leases, live())
				}
			}
			if s := stats(t, b); s.Leases < live() {
				t.Fatalf("op %d: %d leases outstanding, fewer than the %d live", i, s.Leases, live())
			}
		}
	})
}
