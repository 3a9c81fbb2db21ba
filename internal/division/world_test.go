package division_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/handover"
)

// The world: pods of one caller whose demand changes, replicas of the
// permit server holding slices of the reserve and lending them per call,
// and the controller dividing the permits by demand (division.Follow) and
// moving them through the handover (handover.Step). The adversary chooses
// the demands (forged ones too), the calls, when documents reach the
// processes (late, out of order), which acknowledgements are lost or read
// stale, which lease returns are lost or repeated or sent to another run,
// when a replica restarts and which pods are Ready. At every step the world
// counts what really holds a permit: every pod's gate enforces the larger
// of its limit and its calls in flight (a smaller limit drains), and every
// lease a replica lent and has not ended, from any of its runs.
//
// Every process here acknowledges (late, or read stale): the delay after
// which the handover takes a pod that never acknowledges to have applied
// its share is safe only if such a pod does apply within it, which
// internal/handover's own simulation plays.

// chooser is the adversary's source of choices.
type chooser interface {
	IntN(n int) int
}

// bytesChooser reads choices from fuzz data, 0 once it is exhausted, so
// that every input is a complete world.
type bytesChooser struct{ data []byte }

func (b *bytesChooser) IntN(n int) int {
	if len(b.data) == 0 {
		return 0
	}
	v := int(b.data[0])
	b.data = b.data[1:]
	return v % n
}

// document is one published revision, as one process receives it.
type document struct {
	revision, told int64
	at             int // the step it arrives
}

// call is one call in flight in a pod: on its own permit, or on a lease.
type call struct {
	ends   int
	lender int // -1 on the pod's own permit
	lease  lease
}

// lease is one lent permit of one run (incarnation) of a replica; it ends
// when its call returns it or at its expiry, whichever is first.
type lease struct {
	incarnation, id int
	expires         int
}

// member is a pod or a replica, as the world and the controller see it.
type member struct {
	key    string
	lender bool
	ready  bool
	demand int64 // what the controller reads of the pod's demand

	// The controller's state.
	record     handover.Record
	previous   int64
	ackedSeen  int64 // the acknowledgement as the controller last read it
	ackedFresh int64 // the newest the process has written

	// The process.
	inbox      []document
	revision   int64 // the revision applied
	limit      int64 // the share in force
	calls      []call
	incarn     int            // a replica's run
	table      map[lease]bool // a replica's leases outstanding, as it knows them
	learnUntil int            // a replica lends nothing before this step
	oldLeases  map[lease]bool // leases of earlier runs still held by calls
	nextID     int
}

type world struct {
	c        chooser
	total    int64
	follow   division.Follow
	ttl      int // the longest lease, in steps (a call ends within it)
	members  []*member
	revision int64
	now      int
	epoch    time.Time
}

func newWorld(c chooser) *world {
	w := &world{c: c, epoch: time.Unix(0, 0)}
	w.total = int64(c.IntN(60))
	w.ttl = 2 + c.IntN(5)
	w.follow = division.Follow{
		Reserve: int64(c.IntN(10)),
		Floor:   int64(c.IntN(3)),
		Band:    division.Band{Min: int64(c.IntN(3)), Fraction: float64(c.IntN(4)) / 8},
	}
	for i := range 1 + c.IntN(8) {
		w.members = append(w.members, &member{key: fmt.Sprintf("pod-%d", i), ready: c.IntN(4) > 0})
	}
	for i := range c.IntN(3) {
		w.members = append(w.members, &member{key: fmt.Sprintf("reserve-%d", i), lender: true, ready: c.IntN(4) > 0,
			table: map[lease]bool{}, oldLeases: map[lease]bool{}})
	}
	return w
}

// inUse is what holds a permit now: every pod's max(limit, calls on its
// own permits) and every replica's leases outstanding, those it knows and
// those of its earlier runs that calls still hold.
func (w *world) inUse() int64 {
	var sum int64
	for _, m := range w.members {
		if m.lender {
			sum += int64(len(m.table) + len(m.oldLeases))
			continue
		}
		own := int64(0)
		for _, c := range m.calls {
			if c.lender < 0 {
				own++
			}
		}
		sum += max(m.limit, own)
	}
	return sum
}

// control is one pass of the controller: targets by demand, one handover
// step, and the documents sent.
func (w *world) control() {
	claimants := make([]division.Claimant, len(w.members))
	for i, m := range w.members {
		claimants[i] = division.Claimant{Key: m.key, Serving: m.ready, Lender: m.lender, Demand: m.demand, Previous: m.previous}
	}
	targets := w.follow.Targets(w.total, claimants)
	in := handover.Input{Total: w.total, Revision: w.revision, Now: w.epoch.Add(time.Duration(w.now) * time.Second),
		UnacknowledgedDelay: 1000 * time.Hour}
	for i, m := range w.members {
		in.Pods = append(in.Pods, handover.Pod{Key: m.key, Target: targets[i], Acked: m.ackedSeen, Record: m.record})
		m.previous = targets[i]
	}
	res := handover.Step(in)
	w.revision = res.Revision
	for i, m := range w.members {
		m.record = res.Records[i]
		if res.Changed {
			m.inbox = append(m.inbox, document{revision: res.Revision, told: m.record.Told, at: w.now + w.c.IntN(4)})
		}
	}
}

// deliver hands each process the documents that arrived, in any order: a
// process applies a revision newer than the one it has, ignores the rest.
func (w *world) deliver() {
	for _, m := range w.members {
		var keep []document
		for len(m.inbox) > 0 {
			j := w.c.IntN(len(m.inbox))
			d := m.inbox[j]
			m.inbox = append(m.inbox[:j], m.inbox[j+1:]...)
			if d.at > w.now {
				keep = append(keep, d)
				continue
			}
			if d.revision > m.revision {
				m.revision, m.limit = d.revision, d.told
			}
		}
		m.inbox = keep
	}
}

// acknowledge writes each process's acknowledgement (the library's rule:
// its calls within the share it applied; a replica's leases within its
// slice, and never while it learns) and lets the controller read it, or a
// stale one, or miss it.
func (w *world) acknowledge() {
	for _, m := range w.members {
		var held int64
		if m.lender {
			held = int64(len(m.table) + len(m.oldLeases))
			if w.now < m.learnUntil {
				held = w.total + 1
			}
		} else {
			for _, c := range m.calls {
				if c.lender < 0 {
					held++
				}
			}
		}
		if m.revision > 0 && held <= m.limit {
			m.ackedFresh = max(m.ackedFresh, m.revision)
		}
		switch w.c.IntN(4) {
		case 0: // not read this pass
		case 1: // read from a stale cache: an older value
			m.ackedSeen = max(m.ackedSeen, m.ackedFresh-int64(w.c.IntN(3)))
			m.ackedSeen = min(m.ackedSeen, m.ackedFresh)
		default:
			m.ackedSeen = m.ackedFresh
		}
	}
}

// traffic ends calls (returning leases, or losing the return, or sending
// it twice or to another run), ends expired leases, starts new calls on
// the pods' own permits or on a lease, and restarts replicas.
func (w *world) traffic() {
	lenders := []*member{}
	for _, m := range w.members {
		if m.lender {
			lenders = append(lenders, m)
		}
	}
	for _, m := range w.members {
		if m.lender {
			continue
		}
		var running []call
		for _, c := range m.calls {
			if c.ends > w.now {
				running = append(running, c)
				continue
			}
			if c.lender < 0 {
				continue
			}
			l := lenders[c.lender]
			delete(l.oldLeases, c.lease)
			switch w.c.IntN(5) {
			case 0: // the return is lost: the lease ends at its expiry
			case 1: // returned twice
				delete(l.table, c.lease)
				delete(l.table, c.lease)
			default:
				if c.lease.incarnation == l.incarn {
					delete(l.table, c.lease)
				}
			}
		}
		m.calls = running
	}
	for _, l := range lenders {
		for _, leases := range []map[lease]bool{l.table, l.oldLeases} {
			for ls := range leases {
				if ls.expires <= w.now {
					delete(leases, ls)
				}
			}
		}
		if w.c.IntN(12) == 0 {
			// Restart: the run's leases are forgotten but may be in use.
			for ls := range l.table {
				l.oldLeases[ls] = true
			}
			l.table = map[lease]bool{}
			l.incarn++
			l.learnUntil = w.now + w.ttl
			l.revision, l.limit = 0, 0 // it reads its document again
			l.inbox = append(l.inbox, document{revision: w.revision, told: l.record.Told, at: w.now})
		}
	}
	for _, m := range w.members {
		if m.lender || !m.ready {
			continue
		}
		for range w.c.IntN(int(min(max(m.demand, 0), 8)) + 2) {
			ends := w.now + 1 + w.c.IntN(w.ttl-1)
			own := int64(0)
			for _, c := range m.calls {
				if c.lender < 0 {
					own++
				}
			}
			if own < m.limit {
				m.calls = append(m.calls, call{ends: ends, lender: -1})
				continue
			}
			if len(lenders) == 0 {
				continue
			}
			li := w.c.IntN(len(lenders))
			l := lenders[li]
			if w.now < l.learnUntil || int64(len(l.table)) >= l.limit {
				continue // refused: the call goes on with the pod's own share only, shed here
			}
			l.nextID++
			ls := lease{incarnation: l.incarn, id: l.nextID, expires: w.now + w.ttl}
			l.table[ls] = true
			m.calls = append(m.calls, call{ends: ends, lender: li, lease: ls})
		}
	}
}

// change moves demands (measured or forged) and readiness.
func (w *world) change() {
	for _, m := range w.members {
		switch w.c.IntN(8) {
		case 0:
			m.demand = -1 // not measured
		case 1:
			m.demand = division.Unbounded - int64(w.c.IntN(2)) // forged
		case 2, 3:
			m.demand = int64(w.c.IntN(30))
		}
		if w.c.IntN(10) == 0 {
			m.ready = !m.ready
		}
	}
}

// run plays steps steps and returns the first step at which more than the
// total held permits, with what held them, or "".
func (w *world) run(steps int) string {
	for w.now = 0; w.now < steps; w.now++ {
		for _, phase := range []struct {
			name string
			f    func()
		}{{"demand", w.change}, {"controller", w.control}, {"delivery", w.deliver}, {"acknowledgement", w.acknowledge}, {"traffic", w.traffic}} {
			phase.f()
			if got := w.inUse(); got > w.total {
				return fmt.Sprintf("step %d, after %s: %d permits held, more than the total %d", w.now, phase.name, got, w.total)
			}
		}
	}
	return ""
}

// TestFollowWorlds plays 10,000 seeded worlds of 60 steps: demand changes,
// borrowed permits and every adversary above, and at every step the
// permits enforceable by pods plus the leases outstanding stay within the
// total.
func TestFollowWorlds(t *testing.T) {
	worlds := 10_000
	if testing.Short() {
		worlds = 1000
	}
	var lent, moved int
	for seed := range worlds {
		w := newWorld(rand.New(rand.NewPCG(uint64(seed), 21)))
		if e := w.run(60); e != "" {
			t.Fatalf("world %d: %s", seed, e)
		}
		for _, m := range w.members {
			if m.lender {
				lent += m.nextID
			}
		}
		if w.revision > 2 {
			moved++
		}
	}
	// The worlds must exercise what they check: leases lent, divisions moved.
	if lent < worlds || moved < worlds/2 {
		t.Fatalf("%d leases lent and %d worlds with a moving division in %d worlds: the worlds do not exercise the reserve and the handover", lent, moved, worlds)
	}
	t.Logf("%d worlds: %d leases lent, %d worlds whose division moved", worlds, lent, moved)
}

// FuzzFollowWorld plays the world of TestFollowWorlds with every choice
// read from the fuzz data.
func FuzzFollowWorld(f *testing.F) {
	f.Add([]byte{40, 3, 5, 1, 1, 0, 3, 1, 2, 1})
	f.Add([]byte{59, 6, 9, 2, 2, 4, 7, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		w := newWorld(&bytesChooser{data: data})
		if e := w.run(40); e != "" {
			t.Fatal(e)
		}
	})
}
