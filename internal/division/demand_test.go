package division

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func pods(demands ...int64) []Claimant {
	out := make([]Claimant, len(demands))
	for i, d := range demands {
		out[i] = Claimant{Key: string(rune('a' + i)), Serving: true, Demand: d}
	}
	return out
}

func lenders(n int) []Claimant {
	out := make([]Claimant, n)
	for i := range out {
		out[i] = Claimant{Key: "reserve-" + string(rune('0'+i)), Serving: true, Lender: true}
	}
	return out
}

// TestFollowTargets checks divisions worked out by hand.
func TestFollowTargets(t *testing.T) {
	nb := func(cs []Claimant, i int) []Claimant { cs[i].Serving = false; return cs }
	for _, c := range []struct {
		name    string
		follow  Follow
		total   int64
		members []Claimant
		want    []int64
	}{{
		// Floors 1 each (4), 36 left; demands above the floor 19, 9, 1, 0
		// take 29; the surplus 7 goes 2, 2, 2, 1 (ties by key).
		name: "demands fit, surplus evenly", follow: DefaultFollow, total: 40,
		members: pods(20, 10, 2, 0), want: []int64{22, 12, 4, 2},
	}, {
		// Demands 30, 30 over 36 after the floors: level 18 each.
		name: "overloaded, idle pods keep the floor", follow: DefaultFollow, total: 40,
		members: pods(30, 30, 0, 0), want: []int64{19, 19, 1, 1},
	}, {
		// A small demand is met exactly; the rest share the level.
		name: "max-min", follow: Follow{}, total: 10,
		members: pods(2, 100, 100), want: []int64{2, 4, 4},
	}, {
		name: "equal demands are equal shares", follow: DefaultFollow, total: 40,
		members: pods(5, 5, 5, 5, 5, 5, 5, 5), want: []int64{5, 5, 5, 5, 5, 5, 5, 5},
	}, {
		// 3 permits over 4 pods: the floor is cut to 0 per pod.
		name: "floor cut to what there is", follow: Follow{Floor: 2}, total: 3,
		members: pods(0, 0, 0, 9), want: []int64{0, 0, 0, 3},
	}, {
		// A pod not measured yet claims without a cap.
		name: "unmeasured demand", follow: DefaultFollow, total: 12,
		members: pods(-1, 2, 0), want: []int64{9, 2, 1},
	}, {
		name: "not serving gets 0", follow: DefaultFollow, total: 12,
		members: nb(pods(6, 6, 6), 1), want: []int64{6, 0, 6},
	}, {
		// The reserve over two replicas exactly, the rest by demand.
		name: "reserve slices", follow: Follow{Reserve: 8, Floor: 1}, total: 40,
		members: append(lenders(2), pods(20, 0, 4)...), want: []int64{4, 4, 23, 3, 6},
	}, {
		// No serving replica: the pods hold the reserve too.
		name: "no serving replica", follow: Follow{Reserve: 8, Floor: 1}, total: 40,
		members: append(nb(lenders(1), 0), pods(20, 0, 4)...), want: []int64{0, 25, 6, 9},
	}, {
		// No serving pod: the replicas hold their slice and no more.
		name: "no serving pod", follow: Follow{Reserve: 8, Floor: 1}, total: 40,
		members: append(lenders(3), nb(pods(20), 0)...), want: []int64{3, 3, 2, 0},
	}, {
		name: "reserve above total", follow: Follow{Reserve: 50}, total: 40,
		members: append(lenders(1), pods(20)...), want: []int64{40, 0},
	}} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.follow.Targets(c.total, c.members); !slices.Equal(got, c.want) {
				t.Errorf("Targets(%d) = %v, want %v", c.total, got, c.want)
			}
		})
	}
}

// TestFollowHysteresis: the previous targets stay while they are a
// division of the same permits within the band of the fresh targets, and
// move as soon as one pod drifts past it or the facts change.
func TestFollowHysteresis(t *testing.T) {
	with := func(cs []Claimant, prev ...int64) []Claimant {
		for i := range cs {
			cs[i].Previous = prev[i]
		}
		return cs
	}
	for _, c := range []struct {
		name    string
		total   int64
		members []Claimant
		want    []int64
	}{{
		// Fresh: 11, 11, 10, 8 (demands 10, 10, 9, 7 and a surplus of 4);
		// every previous target within max(1, ⌈¼ × fresh⌉) = 3.
		name: "kept within the band", total: 40,
		members: with(pods(10, 10, 9, 7), 10, 10, 10, 10), want: []int64{10, 10, 10, 10},
	}, {
		// Fresh: 28, 4, 4, 4; the first pod is 18 away.
		name: "moved past the band", total: 40,
		members: with(pods(27, 3, 3, 3), 10, 10, 10, 10), want: []int64{28, 4, 4, 4},
	}, {
		// The previous targets sum to 40, the total is now 44.
		name: "moved when the total changes", total: 44,
		members: with(pods(10, 10, 9, 7), 10, 10, 10, 10), want: []int64{12, 12, 11, 9},
	}, {
		// A pod left serving: its 10 must move.
		name: "moved when a pod stops serving", total: 40,
		members: with(append(pods(10, 10, 9), Claimant{Key: "d", Demand: 7}), 10, 10, 10, 10), want: []int64{14, 14, 12, 0},
	}, {
		// A pod kept below the floor is raised at once.
		name: "moved when below the floor", total: 40,
		members: with(pods(0, 0, 0, 0), 13, 13, 14, 0), want: []int64{10, 10, 10, 10},
	}} {
		t.Run(c.name, func(t *testing.T) {
			if got := DefaultFollow.Targets(c.total, c.members); !slices.Equal(got, c.want) {
				t.Errorf("Targets(%d) = %v, want %v", c.total, got, c.want)
			}
		})
	}
}

// TestFollowPanics: negative inputs are programmer errors.
func TestFollowPanics(t *testing.T) {
	for _, c := range []struct {
		f     Follow
		total int64
	}{{DefaultFollow, -1}, {Follow{Reserve: -1}, 4}, {Follow{Floor: -1}, 4}} {
		if msg := panicMessage(func() { c.f.Targets(c.total, pods(1)) }); !strings.HasPrefix(msg, "division: ") {
			t.Errorf("%+v.Targets(%d) panicked with %q, want a message starting \"division: \"", c.f, c.total, msg)
		}
	}
}

// TestFollowInvariants checks, over 10,000 random divisions, what Follow
// promises whatever the demands (forged ones too: huge, negative, zero):
// the targets of the serving members sum to the total when a pod serves,
// the others get 0, every serving pod at least its floor, the replicas
// their exact slice of the reserve, a pod above its demand only when every
// pod has its demand (the surplus), and with the previous targets a fresh
// division, Targets is idempotent: applied to its own result it returns it.
func TestFollowInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 1))
	for c := range 10_000 {
		f := Follow{Reserve: rng.Int64N(12), Floor: rng.Int64N(4), Band: Band{Min: rng.Int64N(3), Fraction: rng.Float64() / 2}}
		total := rng.Int64N(200)
		members := make([]Claimant, 1+rng.IntN(12))
		for i := range members {
			m := &members[i]
			m.Key = string(rune('a' + rng.IntN(26)))
			m.Serving = rng.IntN(5) > 0
			m.Lender = rng.IntN(5) == 0
			switch rng.IntN(6) {
			case 0:
				m.Demand = -1 - rng.Int64N(1<<40)
			case 1:
				m.Demand = Unbounded - rng.Int64N(3)
			default:
				m.Demand = rng.Int64N(60)
			}
			m.Previous = rng.Int64N(60)
		}
		got := f.Targets(total, members)
		check := func(what string, got []int64) {
			t.Helper()
			if e := checkFollow(f, total, members, got); e != "" {
				t.Fatalf("case %d: %s: %+v.Targets(%d, %+v) = %v: %s", c, what, f, total, members, got, e)
			}
		}
		check("random previous targets", got)
		again := slices.Clone(members)
		for i := range again {
			again[i].Previous = got[i]
		}
		if next := f.Targets(total, again); !slices.Equal(next, got) {
			t.Fatalf("case %d: %+v.Targets(%d, %+v) = %v, not the previous targets %v", c, f, total, again, next, got)
		}
	}
}

// checkFollow returns what is wrong with targets as Follow.Targets's
// result, or "".
func checkFollow(f Follow, total int64, members []Claimant, targets []int64) string {
	var sum, podPart, reserve int64
	var npods, nlenders int64
	for _, m := range members {
		if m.Serving && m.Lender {
			nlenders++
		} else if m.Serving {
			npods++
		}
	}
	if nlenders > 0 {
		reserve = min(f.Reserve, total)
	}
	podPart = total - reserve
	floor := int64(0)
	if npods > 0 {
		floor = min(f.Floor, podPart/npods)
	}
	allMet := true
	for i, m := range members {
		if m.Serving && !m.Lender && m.Demand >= 0 && targets[i] < max(m.Demand, floor) {
			allMet = false
		}
	}
	var lent []int64
	for i, m := range members {
		tg := targets[i]
		sum += tg
		switch {
		case !m.Serving && tg != 0:
			return "a member not serving has a target"
		case !m.Serving:
		case m.Lender:
			lent = append(lent, tg)
		case tg < floor:
			return "a serving pod is below its floor"
		case m.Demand >= 0 && tg > max(m.Demand, floor) && !allMet:
			return "a pod is above its demand while another is below its own"
		}
	}
	if npods > 0 && sum != total {
		return "the targets do not sum to the total"
	}
	if npods == 0 && sum != reserve {
		return "without a serving pod, the replicas do not hold exactly the reserve"
	}
	var slices int64
	for _, l := range lent {
		slices += l
		if nlenders > 0 && (l < reserve/nlenders || l > reserve/nlenders+1) {
			return "a replica's slice is not an exact division of the reserve"
		}
	}
	if slices != reserve {
		return "the replicas' slices do not sum to the reserve"
	}
	return ""
}
