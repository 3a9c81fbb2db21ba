package handover

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

// The simulation below plays pods, their processes and the controller
// against each other, one tick (a second) at a time, so that the tests can
// check what a user would see: the calls really in flight, not only the
// bookkeeping.

const (
	simTick  = time.Second
	simDelay = 10 * simTick // UnacknowledgedDelay
)

// simPod is one pod and its process.
type simPod struct {
	key      string
	caller   int
	ready    bool
	leaving  bool
	acks     bool // acknowledges plans (else relies on the delay)
	closed   bool // gate closed on shutdown
	released bool // reported "released"

	applied   int64 // revision of the plan in force (0: none yet)
	limit     int64 // permits of that plan for this pod
	inflight  int64
	acked     int64     // newest acknowledged revision
	drainBy   time.Time // non-acknowledging pods: calls above limit done by then
	lagTicks  int       // how many ticks this pod takes to apply a plan
	seenSince map[int64]time.Time
}

// sim is the world, the controller's state and the published documents.
type sim struct {
	rng      *rand.Rand
	now      time.Time
	total    int64
	pods     []*simPod
	nextName int

	callers int      // callers sharing the total (1 or 2)
	demand  [2]int64 // each caller's demand in flight
	weight  [2]int64
	parts   []int64 // the last split over callers

	revision  int64
	records   map[string]Record
	published map[int64]map[string]int64 // revision → pod → permits
	pubTime   map[int64]time.Time
	latest    int64
}

func newSim(seed uint64, total int64) *sim {
	return &sim{
		callers:   1,
		demand:    [2]int64{division.Unbounded, division.Unbounded},
		weight:    [2]int64{1, 1},
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		total:     total,
		records:   map[string]Record{},
		published: map[int64]map[string]int64{},
		pubTime:   map[int64]time.Time{},
	}
}

func (s *sim) addPod(acks bool) *simPod {
	p := &simPod{key: fmt.Sprintf("pod-%03d", s.nextName), caller: s.rng.IntN(s.callers), acks: acks, lagTicks: s.rng.IntN(4), seenSince: map[int64]time.Time{}}
	s.nextName++
	s.pods = append(s.pods, p)
	p.read(s, s.latest) // a new process reads the current plan: it is not named, so 0
	return p
}

// read puts revision rev in force in p's process.
func (p *simPod) read(s *sim, rev int64) {
	if rev <= p.applied && p.applied != 0 {
		return
	}
	p.applied = rev
	p.limit = s.published[rev][p.key]
	if !p.acks && p.inflight > p.limit {
		// Calls have deadlines: above the limit they are done within
		// half the delay of the plan being applied.
		p.drainBy = s.now.Add(simDelay / 2)
	}
}

// controller runs one reconcile: targets by exact division, then Step, then
// publish.
func (s *sim) controller() {
	slices.SortFunc(s.pods, func(a, b *simPod) int { return compareStrings(a.key, b.key) })
	// The split over callers: a caller without serving pods takes no
	// part, not even of a surplus.
	var claims []division.Claim
	var who []int
	for c := range s.callers {
		for _, p := range s.pods {
			if p.caller == c && p.ready && !p.leaving {
				claims = append(claims, division.Claim{Name: fmt.Sprint("caller-", c), Weight: s.weight[c], Demand: s.demand[c]})
				who = append(who, c)
				break
			}
		}
	}
	s.parts = make([]int64, s.callers)
	for i, part := range division.FairShare(s.total, claims) {
		s.parts[who[i]] = part
	}
	targets := make([]int64, len(s.pods))
	for c := range s.callers {
		var members []division.Member
		var idx []int
		for i, p := range s.pods {
			if p.caller == c {
				members = append(members, division.Member{Key: p.key, Serving: p.ready && !p.leaving, Told: s.records[p.key].Told})
				idx = append(idx, i)
			}
		}
		for j, t := range division.Targets(s.parts[c], members) {
			targets[idx[j]] = t
		}
	}
	in := Input{Total: s.total, Revision: s.revision, Now: s.now, UnacknowledgedDelay: simDelay}
	for i, p := range s.pods {
		in.Pods = append(in.Pods, Pod{Key: p.key, Target: targets[i], Leaving: p.leaving, Acked: p.acked, Released: p.released, Published: s.latest, Record: s.records[p.key]})
	}
	res := Step(in)
	s.records = map[string]Record{}
	doc := map[string]int64{}
	for i, p := range s.pods {
		s.records[p.key] = res.Records[i]
		if res.Records[i].Told > 0 {
			doc[p.key] = res.Records[i].Told
		}
	}
	if res.Revision != s.revision {
		s.revision = res.Revision
		s.published[res.Revision] = doc
		s.pubTime[res.Revision] = s.now
		s.latest = res.Revision
	}
}

// processes lets every pod's process run for one tick: read plans, admit
// and finish calls, acknowledge, shut down.
func (s *sim) processes(traffic bool) {
	for _, p := range s.pods {
		if s.latest > p.applied {
			age := s.now.Sub(s.pubTime[s.latest])
			// A pod that does not acknowledge applies within half the delay;
			// one that does may lag as long as it likes.
			if age >= time.Duration(p.lagTicks)*simTick || (!p.acks && age >= simDelay/2) {
				p.read(s, s.latest)
			}
		}
		if traffic && p.ready && !p.closed {
			// Admission: new calls only below the limit in force.
			if p.inflight < p.limit {
				p.inflight = min(p.limit, p.inflight+s.rng.Int64N(4))
			}
		}
		if p.inflight > 0 {
			p.inflight -= s.rng.Int64N(p.inflight + 1)
		}
		if !p.acks && !p.drainBy.IsZero() && !s.now.Before(p.drainBy) {
			p.inflight = min(p.inflight, p.limit)
			p.drainBy = time.Time{}
		}
		if p.acks && p.applied > 0 && p.inflight <= p.limit {
			p.acked = max(p.acked, p.applied)
		}
		if p.leaving && p.closed && p.inflight == 0 && p.acks {
			p.released = true
		}
	}
}

// inFlight is the calls really in flight across the pods.
func (s *sim) inFlight() int64 {
	var n int64
	for _, p := range s.pods {
		n += p.inflight
	}
	return n
}

// bound is the controller's Σ max(Told, Holds).
func (s *sim) bound() int64 {
	var n int64
	for _, r := range s.records {
		n += r.Bound()
	}
	return n
}

// event changes the world at random.
func (s *sim) event(acksShare int) {
	switch k := s.rng.IntN(10); {
	case k < 3 && len(s.pods) < 14:
		s.addPod(s.rng.IntN(10) < acksShare)
	case k < 6 && len(s.pods) > 0:
		p := s.pods[s.rng.IntN(len(s.pods))]
		if !p.leaving {
			p.ready = !p.ready || s.rng.IntN(4) > 0
		}
	case k < 8 && len(s.pods) > 0:
		p := s.pods[s.rng.IntN(len(s.pods))]
		if !p.leaving {
			p.leaving = true
		} else if !p.closed {
			p.closed = true
		}
	case k < 9 && s.callers > 1 && s.rng.IntN(2) == 0:
		// A caller's demand changes.
		c := s.rng.IntN(s.callers)
		if s.rng.IntN(3) == 0 {
			s.demand[c] = division.Unbounded
		} else {
			s.demand[c] = s.rng.Int64N(s.total + 2)
		}
	case k < 9 && len(s.pods) > 0:
		// A leaving pod is gone: after its grace period, whatever it held
		// ends with it.
		i := s.rng.IntN(len(s.pods))
		if s.pods[i].leaving && (s.pods[i].released || s.rng.IntN(3) == 0) {
			s.pods = slices.Delete(s.pods, i, i+1)
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
