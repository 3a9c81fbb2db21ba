package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	reservev1 "github.com/backpressure-dev/backpressure-operator/api/reserve/v1"
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
	// Ticketed borrows, withdrawn while live, after their time, and
	// before they are made.
	f.Add([]byte{4, 255, 4, 255, 6, 50, 6, 9, 7, 1, 7, 3, 7, 0, 6, 0, 4, 90, 7, 1, 6, 3})
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
			lease  broker.Lease
			ticket uint64 // 0: none
			ends   time.Time
			done   bool // returned or withdrawn
		}
		// withdrawn are the tickets withdrawn before their borrow, and
		// until when the server refuses it (the longest lease).
		withdrawn := map[uint64]time.Time{}
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
			op, arg := ops[i]%8, int(ops[i+1])
			now := clock.Now()
			switch op {
			case 0, 6: // borrow, holding 1..256ms; op 6 with a ticket
				hold := time.Duration(arg+1) * time.Millisecond
				var ticket uint64
				if op == 6 {
					ticket = uint64(i + 1)
				}
				learning := now.Before(b.LearningUntil())
				until, ok := withdrawn[ticket]
				refused := !learning && ok && now.Before(until)
				want := !learning && live() < capacity && !refused
				l, err := b.Borrow(context.Background(), broker.Request{Gate: "g", Pod: "p", Hold: hold, Ticket: ticket})
				var refusal *broker.Refusal
				switch {
				case refused && (err == nil || !errors.As(err, &refusal) || refusal.Reason != reservev1.Reason_REASON_WITHDRAWN):
					t.Fatalf("op %d: a borrow whose ticket was withdrawn first: %+v, %v, want WITHDRAWN", i, l, err)
				case want && err != nil:
					t.Fatalf("op %d: borrow refused (%v) with %d live of %d, past learning", i, err, live(), capacity)
				case !want && err == nil:
					t.Fatalf("op %d: borrow lent with %d live of %d (learning until %s, now %s)", i, live(), capacity, b.LearningUntil(), now)
				case err != nil && !errors.As(err, &refusal):
					t.Fatalf("op %d: %v", i, err)
				case err == nil:
					leases = append(leases, &modelLease{lease: l, ticket: ticket, ends: now.Add(l.TTL)})
				}
			case 7: // withdraw a ticketed borrow granted before, live or not, or one not yet made
				if arg%2 == 0 {
					// The ticket of a borrow a later op may make.
					ticket := uint64(i + 3 + 2*(arg%8))
					if b.Withdraw("g", ticket) {
						t.Fatalf("op %d: Withdraw of ticket %d, no borrow's yet, = true", i, ticket)
					}
					withdrawn[ticket] = now.Add(learning)
					continue
				}
				var ticketed []*modelLease
				for _, l := range leases {
					if l.ticket != 0 {
						ticketed = append(ticketed, l)
					}
				}
				if len(ticketed) == 0 {
					continue
				}
				l := ticketed[arg%len(ticketed)]
				want := !l.done && now.Before(l.ends)
				if got := b.Withdraw("g", l.ticket); got != want {
					t.Fatalf("op %d: Withdraw of a lease's ticket (ended %v, ends %s, now %s) = %v", i, l.done, l.ends, now, got)
				}
				l.done = true
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
