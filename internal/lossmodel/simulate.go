package lossmodel

import (
	"math"
	"math/rand/v2"
)

// Result is what one Scenario admitted.
type Result struct {
	// Calls is the calls counted (after the warm-up).
	Calls int
	// Admitted is the calls admitted, by their pod's share or the reserve.
	Admitted int
	// Borrowed is the admitted calls that ran on a reserve permit or, under
	// OfferIdle, on a permit another pod offered.
	Borrowed int
	// Offered is the borrowed calls that ran on another pod's offered
	// permit (OfferIdle).
	Offered int
	// Waited is the admitted calls that waited in a waiting room first.
	Waited int
	// PeakInFlight is the most calls in flight at once, the reserve's
	// included; it never exceeds A.
	PeakInFlight int
	// OverShare counts the times a pod had more of its own permits in use
	// (its calls on them and, under OfferIdle, the permits it lent) than
	// its share: never, which the tests check of the model itself.
	OverShare int
	// Shares is the permits each pod held.
	Shares []int
	// Weights is each pod's part of the calls.
	Weights []float64
}

// AdmittedFraction is Admitted / Calls.
func (r Result) AdmittedFraction() float64 { return ratio(r.Admitted, r.Calls) }

// BorrowedFraction is Borrowed / Admitted: the part of the admitted calls
// not decided inside their pod.
func (r Result) BorrowedFraction() float64 { return ratio(r.Borrowed, r.Admitted) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Comparison is a scenario beside its global gate.
type Comparison struct {
	Scenario, Global Result
}

// Ratio is the calls the scenario admitted over those the global gate
// admitted, from the same calls.
func (c Comparison) Ratio() float64 { return ratio(c.Scenario.Admitted, c.Global.Admitted) }

// Compare simulates s and its GlobalGate on the same calls.
func Compare(s Scenario) (Comparison, error) {
	r, err := Simulate(s)
	if err != nil {
		return Comparison{}, err
	}
	g, err := Simulate(s.GlobalGate())
	if err != nil {
		return Comparison{}, err
	}
	return Comparison{Scenario: r, Global: g}, nil
}

// Simulate runs s and returns what it admitted.
func Simulate(s Scenario) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	w := s.weights()
	sim := newSimulation(s, w)
	sim.run()
	sim.res.Shares = sim.shares
	sim.res.Weights = w
	return sim.res, nil
}

// waiter is a call in a waiting room.
type waiter struct {
	arrival, latency float64
	counted          bool
}

// pod is one pod's gate: its permits and its waiting room.
type pod struct {
	permits, inFlight, room int
	// loans are the pod's calls on lent permits; moved of them hold one of
	// the pod's permits instead, their loans given back (GiveLoansBack).
	loans, moved int
	// lenders are where the loans not moved came from, oldest first: the
	// reserve (-1) or the pod that offered the permit (OfferIdle). Calls
	// are alike but for their ends, so a list rather than one entry per
	// call: see endBorrowed.
	lenders []int32
	// idle are the ends of the pod's held loans (HoldLoans), in order.
	idle  []float64
	queue fifo
}

// fifo is a waiting room, first in first out.
type fifo struct {
	items []waiter
	head  int
}

func (q *fifo) len() int       { return len(q.items) - q.head }
func (q *fifo) front() *waiter { return &q.items[q.head] }
func (q *fifo) push(w waiter)  { q.items = append(q.items, w) }

func (q *fifo) pop() waiter {
	w := q.items[q.head]
	q.head++
	if q.head > 64 && q.head*2 > len(q.items) {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return w
}

type eventKind uint8

const (
	endLocal    eventKind = iota // a call on its pod's permit ends
	endBorrowed                  // a call on a reserve permit ends
	waitEnds                     // the pod's first waiter reaches MaxQueueWait
	askServer                    // a waiter of the pod reaches AskAfter
	holdEnds                     // a loan held by the pod reaches HoldLoans
)

// event is something that happens to pod at t; lender is the lender of an
// endBorrowed call's permit (-1: the reserve).
type event struct {
	t      float64
	pod    int32
	lender int32
	kind   eventKind
}

// fromReserve is the lender of a reserve permit.
const fromReserve = -1

// events is a binary min-heap on t. It is typed rather than built on
// container/heap, whose interface would box every event: the heap is the
// simulation's inner loop.
type events []event

func (h *events) push(x event) {
	e := append(*h, x)
	for i := len(e) - 1; i > 0; {
		parent := (i - 1) / 2
		if e[parent].t <= e[i].t {
			break
		}
		e[parent], e[i] = e[i], e[parent]
		i = parent
	}
	*h = e
}

func (h *events) pop() event {
	e := *h
	top := e[0]
	last := len(e) - 1
	e[0] = e[last]
	e = e[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < last && e[l].t < e[small].t {
			small = l
		}
		if r < last && e[r].t < e[small].t {
			small = r
		}
		if small == i {
			break
		}
		e[i], e[small] = e[small], e[i]
		i = small
	}
	*h = e
	return top
}

type simulation struct {
	s      Scenario
	shares []int
	// pods are the pods' gates, and one more whose queue holds the calls
	// waiting at the permit server without a place in their pod's
	// waiting room (BorrowWaiting); it has no permits and no calls are
	// routed to it.
	pods     []pod
	cum      []float64 // cumulative weights, for Pinned
	reserve  int       // reserve permits in use
	inFlight int
	maxWait  float64
	events   events
	arrivals *rand.Rand
	routing  *rand.Rand
	mu, sd   float64 // the lognormal's parameters
	res      Result
}

func newSimulation(s Scenario, w []float64) *simulation {
	sim := &simulation{
		s:        s,
		shares:   s.shares(w),
		pods:     make([]pod, s.Pods+1),
		arrivals: rand.New(rand.NewPCG(s.Seed, streamArrivals)),
		routing:  rand.New(rand.NewPCG(s.Seed, streamRouting)),
		maxWait:  s.MaxQueueWait.Seconds(),
	}
	for i := range sim.pods[:s.Pods] {
		p := &sim.pods[i]
		p.permits = sim.shares[i]
		p.room = s.roomFor(p.permits)
	}
	var sum float64
	for _, wi := range w {
		sum += wi
		sim.cum = append(sim.cum, sum)
	}
	mean := s.Latency.Mean.Seconds()
	sim.sd = math.Sqrt(math.Log1p(s.Latency.CV * s.Latency.CV))
	sim.mu = math.Log(mean) - sim.sd*sim.sd/2
	return sim
}

func (sim *simulation) latency() float64 {
	if sim.s.Latency.Shape == Exponential {
		return sim.arrivals.ExpFloat64() * sim.s.Latency.Mean.Seconds()
	}
	return math.Exp(sim.mu + sim.sd*sim.arrivals.NormFloat64())
}

func (sim *simulation) route(i int) int {
	switch sim.s.balancer() {
	case Random:
		return sim.routing.IntN(sim.s.Pods)
	case Pinned:
		u := sim.routing.Float64() * sim.cum[len(sim.cum)-1]
		for p, c := range sim.cum {
			if u < c {
				return p
			}
		}
		return len(sim.cum) - 1
	default:
		return i % sim.s.Pods
	}
}

func (sim *simulation) run() {
	s := sim.s
	rate := s.Load * float64(s.Permits) / s.Latency.Mean.Seconds()
	calls := s.calls()
	warmup := calls / 50
	var t float64
	for i := range calls {
		t += sim.arrivals.ExpFloat64() / rate
		latency := sim.latency()
		p := sim.route(i)
		sim.until(t)
		sim.arrive(t, p, waiter{arrival: t, latency: latency, counted: i >= warmup})
	}
	// Whoever still waits once every call has ended was never admitted:
	// counted as a call, not as admitted.
	sim.until(math.Inf(1))
}

// until handles every event up to t, in order.
func (sim *simulation) until(t float64) {
	for len(sim.events) > 0 && sim.events[0].t <= t {
		e := sim.events.pop()
		p := &sim.pods[e.pod]
		switch e.kind {
		case endLocal:
			sim.inFlight--
			sim.ownFree(e.t, int(e.pod))
		case endBorrowed:
			sim.inFlight--
			p.loans--
			if p.moved > 0 {
				// Calls are alike but for their ends: the call that ends
				// stands for the one whose loan went back. (The library
				// would know which call moved; which one it is changes
				// only whether this end frees the pod's permit or a
				// lender's, and a pod's permit freeing with no waiter
				// gives the next loan back at once.)
				p.moved--
				sim.ownFree(e.t, int(e.pod))
				continue
			}
			// Likewise the call stands for a loan of its own lender if the
			// pod still has one out, else for its oldest.
			if lender := p.takeLender(e.lender); lender != fromReserve {
				sim.ownFree(e.t, int(lender))
				continue
			}
			switch {
			case sim.s.KeepLoans && p.queue.len() > 0:
				// The loan passes to the pod's first waiter: the reserve's
				// permits in use do not change.
				w := p.queue.pop()
				sim.count(w, &sim.res.Waited)
				sim.admit(e.t, int(e.pod), w, endBorrowed, fromReserve)
			case sim.s.HoldLoans > 0:
				end := e.t + sim.s.HoldLoans.Seconds()
				p.idle = append(p.idle, end)
				sim.events.push(event{t: end, pod: e.pod, kind: holdEnds})
			default:
				sim.giveBack(e.t)
			}
		case holdEnds:
			// A held loan taken by a call before its end is no longer in
			// idle; the ones left at the front are the ones that end now.
			for len(p.idle) > 0 && p.idle[0] <= e.t+1e-12 {
				p.idle = p.idle[1:]
				sim.giveBack(e.t)
			}
		case askServer:
			// Waiters reach AskAfter in the order they came: the first
			// is the one this event is for, or one before it.
			if p.queue.len() == 0 || !sim.asks(int(e.pod), e.t) {
				continue
			}
			if sim.reserve < sim.s.Reserve {
				sim.lendToFirst(e.t, int(e.pod))
			} else if o := sim.offerer(int(e.pod)); o >= 0 {
				w := p.queue.pop()
				sim.count(w, &sim.res.Waited)
				sim.offer(e.t, int(e.pod), o, w)
			}
		case waitEnds:
			// The waiters that reach MaxQueueWait leave, shed; MaxQueueWait
			// is the same for every call, so they are at the front.
			for p.queue.len() > 0 && p.queue.front().arrival+sim.maxWait <= e.t {
				p.queue.pop()
			}
		}
	}
}

// ownFree frees one of pod i's permits at t: its first waiter runs on it,
// or, under GiveLoansBack, a borrowed call of the pod moves onto it and its
// loan goes back.
func (sim *simulation) ownFree(t float64, i int) {
	p := &sim.pods[i]
	p.inFlight--
	switch {
	case p.queue.len() > 0:
		w := p.queue.pop()
		sim.count(w, &sim.res.Waited)
		sim.admit(t, i, w, endLocal, 0)
	case sim.s.GiveLoansBack && p.loans > p.moved:
		// The oldest loan goes back, as the library moves the oldest call
		// running on one.
		p.moved++
		sim.take(i)
		lender := p.lenders[0]
		p.lenders = p.lenders[1:]
		if lender == fromReserve {
			sim.giveBack(t)
		} else {
			sim.ownFree(t, int(lender))
		}
	}
}

// take puts one more of pod i's own permits in use.
func (sim *simulation) take(i int) {
	p := &sim.pods[i]
	p.inFlight++
	if p.inFlight > p.permits {
		sim.res.OverShare++
	}
}

// takeLender takes a loan not moved out of p's lenders, lender's if p
// has one from it, else the oldest, and returns whose it was.
func (p *pod) takeLender(lender int32) int32 {
	i := 0
	for j, l := range p.lenders {
		if l == lender {
			i = j
			break
		}
	}
	l := p.lenders[i]
	p.lenders = append(p.lenders[:i], p.lenders[i+1:]...)
	return l
}

// spare is how many of the pod's permits it offers (OfferIdle): those
// free beyond keep, none while a call of its own waits.
func (p *pod) spare(keep int) int {
	if p.queue.len() > 0 {
		return 0
	}
	return max(0, p.permits-p.inFlight-keep)
}

// offerer returns the pod other than i with the most permits to spare
// (the first of them), or -1 when none has any or pods do not offer.
func (sim *simulation) offerer(i int) int {
	if !sim.s.OfferIdle {
		return -1
	}
	best, most := -1, 0
	for j := range sim.pods[:sim.s.Pods] {
		if n := sim.pods[j].spare(sim.s.OfferKeep); j != i && n > most {
			best, most = j, n
		}
	}
	return best
}

// offer starts w's call at t at pod i on a permit pod o offered.
func (sim *simulation) offer(t float64, i, o int, w waiter) {
	sim.take(o)
	sim.count(w, &sim.res.Borrowed)
	sim.count(w, &sim.res.Offered)
	sim.admit(t, i, w, endBorrowed, int32(o))
}

// giveBack returns a reserve permit to the reserve at t. Unless
// BorrowOnce, the reserve lends it at once to the call that has waited
// longest (every waiter also waits at the permit server, in the order it
// came), in a pod's waiting room or, under BorrowWaiting, without one.
func (sim *simulation) giveBack(t float64) {
	sim.reserve--
	if sim.s.borrowing() == BorrowOnce {
		return
	}
	best := -1
	for i := range sim.pods {
		q := &sim.pods[i].queue
		if q.len() > 0 && sim.asks(i, t) && (best < 0 || q.front().arrival < sim.pods[best].queue.front().arrival) {
			best = i
		}
	}
	if best >= 0 {
		sim.lendToFirst(t, best)
	}
}

// lendToFirst lends a free reserve permit at t to the first waiter of pod
// i, which must have one.
func (sim *simulation) lendToFirst(t float64, i int) {
	w := sim.pods[i].queue.pop()
	sim.reserve++
	sim.count(w, &sim.res.Borrowed)
	sim.count(w, &sim.res.Waited)
	sim.admit(t, i, w, endBorrowed, fromReserve)
}

// asks reports whether the first waiter of pod i (which must have one)
// asks the permit server at t: always at the server's own queue, else
// once it has waited AskAfter.
func (sim *simulation) asks(i int, t float64) bool {
	return i == len(sim.pods)-1 || sim.pods[i].queue.front().arrival+sim.s.AskAfter.Seconds() <= t+1e-12
}

func (sim *simulation) arrive(t float64, i int, w waiter) {
	sim.count(w, &sim.res.Calls)
	p := &sim.pods[i]
	switch {
	case p.inFlight < p.permits && p.queue.len() == 0:
		sim.admit(t, i, w, endLocal, 0)
	case len(p.idle) > 0:
		// A loan the pod holds: decided in the pod, not counted borrowed.
		p.idle = p.idle[1:]
		sim.admit(t, i, w, endBorrowed, fromReserve)
	case sim.s.AskAfter > 0 && p.queue.len() < p.room:
		p.queue.push(w)
		sim.events.push(event{t: t + sim.maxWait, pod: int32(i), kind: waitEnds})
		sim.events.push(event{t: t + sim.s.AskAfter.Seconds(), pod: int32(i), kind: askServer})
	case sim.reserve < sim.s.Reserve:
		sim.reserve++
		sim.count(w, &sim.res.Borrowed)
		sim.admit(t, i, w, endBorrowed, fromReserve)
	case sim.offerer(i) >= 0:
		sim.offer(t, i, sim.offerer(i), w)
	case p.queue.len() < p.room:
		p.queue.push(w)
		sim.events.push(event{t: t + sim.maxWait, pod: int32(i), kind: waitEnds})
	case sim.s.borrowing() == BorrowWaiting && sim.s.Reserve > 0 && sim.maxWait > 0:
		server := len(sim.pods) - 1
		sim.pods[server].queue.push(w)
		sim.events.push(event{t: t + sim.maxWait, pod: int32(server), kind: waitEnds})
	}
}

// count adds one to *n if w is counted.
func (sim *simulation) count(w waiter, n *int) {
	if w.counted {
		*n++
	}
}

// admit starts w's call at t at pod i, on the pod's permit (end is
// endLocal) or a permit lender lent (endBorrowed: the reserve's, or
// another pod's under OfferIdle), which the caller took.
func (sim *simulation) admit(t float64, i int, w waiter, end eventKind, lender int32) {
	if end == endLocal {
		sim.take(i)
	} else {
		sim.pods[i].loans++
		sim.pods[i].lenders = append(sim.pods[i].lenders, lender)
	}
	sim.inFlight++
	sim.res.PeakInFlight = max(sim.res.PeakInFlight, sim.inFlight)
	sim.count(w, &sim.res.Admitted)
	sim.events.push(event{t: t + w.latency, pod: int32(i), lender: lender, kind: end})
}
