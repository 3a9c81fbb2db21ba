package division

import (
	"fmt"
	"math"
)

// Claimant is one member of a caller's division as Follow sees it: a pod of
// the caller, or a replica of the permit server holding a slice of the
// reserve.
type Claimant struct {
	// Key identifies the member; it breaks ties.
	Key string
	// Serving is set for a pod that is Ready and not leaving, or a permit
	// server replica that is Ready: the members the permits are divided
	// over. The others get 0.
	Serving bool
	// Lender is set for a permit server replica: it holds a slice of the
	// reserve, lent one call at a time, and no demand of its own.
	Lender bool
	// Demand is a pod's measured demand in permits (its calls in flight,
	// waiting and shed, smoothed); negative when it is not measured yet, and
	// the pod then claims without a cap, as under equal shares.
	Demand int64
	// Previous is the member's target from the previous step; Follow keeps
	// the previous targets while they are close enough (see Follow.Band).
	Previous int64
}

// Follow divides a caller's part over its members by demand: the reserve
// over the permit server's replicas exactly, the rest over the pods by
// weighted max-min fairness capped at each pod's demand, every weight 1,
// the surplus split evenly, no pod below Floor.
type Follow struct {
	// Reserve is the part of the total the permit server's replicas hold,
	// divided exactly over the serving ones. With no serving replica the
	// pods hold it, so that an absent permit server costs them nothing.
	Reserve int64
	// Floor is the least a serving pod gets, whatever its demand, cut to
	// what the pods' part gives every pod when it is smaller. A Ready pod
	// receives calls the instant a balancer sends them, long before its
	// measured demand rises, so a pod at 0 would shed them; 1 permit lets
	// it admit its first call on its own share (and, with a reserve, borrow
	// for the next ones) at the price of one permit per idle pod.
	Floor int64
	// Band is the hysteresis: the previous targets are kept while they are
	// still a division of this total over these members (every serving
	// pod at least its floor, the replicas their exact slices, the others
	// 0) and no pod's fresh target differs from its previous one by more
	// than Band.Of of the fresh target. Demand measured from Poisson
	// arrivals moves by noise; without the band every crossing of a
	// rounding boundary would move permits through the handover.
	Band Band
}

// Band is how far a pod's share may drift from its fresh target before
// the division moves: max(Min, ceil(Fraction × target)) permits.
type Band struct {
	// Min is the least drift that moves the division, in permits.
	Min int64
	// Fraction is the drift, as a fraction of the fresh target, that moves
	// the division.
	Fraction float64
}

// Of returns the band around target: max(Min, ceil(Fraction × target)).
func (b Band) Of(target int64) int64 {
	f := math.Ceil(b.Fraction * float64(target))
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return max(b.Min, int64(f))
}

// DefaultFollow is the division by demand the operator uses: a floor of
// one permit (see Follow.Floor) and a band of one permit or a quarter of
// the target, whichever is more. The quarter is wider than the noise of a
// demand smoothed over tens of seconds (a Poisson in-flight count of mean
// m averaged over a window W of many latencies L varies by about
// √(2mL/W), under a permit for any m a pod holds) and narrower than the
// imbalance demand-following is for: a pod pinned to twice its equal
// share differs from it by half.
var DefaultFollow = Follow{Floor: 1, Band: Band{Min: 1, Fraction: 0.25}}

// Targets returns each member's target, aligned with members, summing to
// total when any pod serves. It panics, with a message starting
// "division: ", on a negative total, Reserve or Floor; callers validate
// their input.
func (f Follow) Targets(total int64, members []Claimant) []int64 {
	if total < 0 || f.Reserve < 0 || f.Floor < 0 {
		panic(fmt.Sprintf("division: Follow.Targets: total %d, Reserve %d, Floor %d; want each at least 0", total, f.Reserve, f.Floor))
	}
	fresh := f.fresh(total, members)
	if f.keep(total, members, fresh) {
		out := make([]int64, len(members))
		for i, m := range members {
			out[i] = m.Previous
		}
		return out
	}
	return fresh
}

// parts returns the serving pods and replicas (indexes into members) and
// what each side holds: the reserve, cut to total, for the replicas when
// any serves, the rest for the pods (held by nobody when no pod serves: a
// replica lends only its slice).
func (f Follow) parts(total int64, members []Claimant) (pods, lenders []int, podPart, reserve int64) {
	for i, m := range members {
		switch {
		case !m.Serving:
		case m.Lender:
			lenders = append(lenders, i)
		default:
			pods = append(pods, i)
		}
	}
	if len(lenders) > 0 {
		reserve = min(f.Reserve, total)
	}
	return pods, lenders, total - reserve, reserve
}

// floor returns the floor each of n serving pods gets out of part.
func (f Follow) floor(part int64, n int) int64 {
	if n == 0 {
		return 0
	}
	return min(f.Floor, part/int64(n))
}

// fresh is the division by demand, ignoring the previous targets.
func (f Follow) fresh(total int64, members []Claimant) []int64 {
	out := make([]int64, len(members))
	pods, lenders, podPart, reserve := f.parts(total, members)
	if len(lenders) > 0 {
		keys := make([]string, len(lenders))
		held := make([]int64, len(lenders))
		for j, i := range lenders {
			keys[j], held[j] = members[i].Key, members[i].Previous
		}
		for j, slice := range Exact(reserve, keys, held) {
			out[lenders[j]] = slice
		}
	}
	if len(pods) == 0 {
		return out
	}
	// Every pod its floor, then the rest by max-min fairness over the
	// demands above the floor, the surplus evenly: FairShare with weight 1.
	fl := f.floor(podPart, len(pods))
	claims := make([]Claim, len(pods))
	for j, i := range pods {
		d := Unbounded
		if m := members[i]; m.Demand >= 0 {
			d = max(m.Demand-fl, 0)
		}
		claims[j] = Claim{Name: members[i].Key, Weight: 1, Demand: d}
	}
	for j, r := range FairShare(podPart-fl*int64(len(pods)), claims) {
		out[pods[j]] = fl + r
	}
	return out
}

// keep reports whether the previous targets still divide total over
// members and lie within the band of the fresh ones.
func (f Follow) keep(total int64, members []Claimant, fresh []int64) bool {
	pods, _, podPart, _ := f.parts(total, members)
	fl := f.floor(podPart, len(pods))
	var sum int64
	for i, m := range members {
		switch {
		case !m.Serving:
			if m.Previous != 0 {
				return false
			}
		case m.Lender:
			// The replicas' slices follow no demand: exact, or moved.
			if m.Previous != fresh[i] {
				return false
			}
		default:
			if m.Previous < fl {
				return false
			}
			if d := m.Previous - fresh[i]; d > f.Band.Of(fresh[i]) || -d > f.Band.Of(fresh[i]) {
				return false
			}
		}
		if m.Previous < 0 || sum > math.MaxInt64-m.Previous {
			return false
		}
		sum += m.Previous
	}
	return sum == total
}
