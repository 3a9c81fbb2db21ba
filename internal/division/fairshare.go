package division

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Claim is one caller's claim on a contract.
type Claim struct {
	// Name identifies the caller; it breaks ties, so results are deterministic.
	Name string
	// Weight is the caller's weight, at least 1 and at most MaxWeight.
	Weight int64
	// Demand is the most the caller can use; Unbounded when it did not say.
	Demand int64
}

// ClaimFloat is one caller's claim on a divisible contract, such as a rate.
type ClaimFloat struct {
	// Name identifies the caller; it orders claims whose demand per weight is
	// equal, so results do not depend on the order of the claims.
	Name string
	// Weight is the caller's weight, at least 1 and at most MaxWeight.
	Weight int64
	// Demand is the most the caller can use; math.Inf(1) when it did not say.
	Demand float64
}

// Unbounded is the Demand of a caller that states none.
//
// It needs no special case: no total exceeds it, so a claim with this demand
// is never satisfied before the others unless it alone takes the whole total.
const Unbounded int64 = math.MaxInt64

// MaxWeight is the largest Weight accepted. It keeps every product the
// algorithm compares (a count below 2^63 times a sum of weights below 2^62)
// within 128 bits, so the arithmetic stays exact without math/big.
const MaxWeight int64 = 1 << 32

// MaxClaims is the largest number of claims accepted, so that the sum of the
// weights, at most MaxClaims·MaxWeight = 2^62, fits an int64.
const MaxClaims = 1 << 30

// FairShare splits total (>= 0) whole units over claims by weighted max-min fairness capped
// at each claim's demand, then hands any surplus (when every demand is met) out by weight, uncapped.
// The result has one entry per claim, in order.
//
// # Algorithm
//
// Phase 1 (water-filling). When the demands add up to more than total, let λ
// be the water level: the unique number with
//
//	Σ min(dᵢ, λ·wᵢ) = total.
//
// Each claim first gets floor(min(dᵢ, λ·wᵢ)), computed exactly in integers
// (λ is a fraction T/W; no floating point is involved). Fewer units than there
// are unsatisfied claims remain; they are handed out one at a time, each to the
// claim below its demand whose next unit has the smallest (rᵢ+1)/wᵢ, ties
// going to the smaller Name, then to the earlier claim. This is the same as
// handing every unit out one at a time by that rule from zero (a divisor
// method, D'Hondt's), which is why the result is monotone in total. Handing the
// remainder out by largest fractional part of λ·wᵢ instead (Hamilton's method)
// is not: with weights 6, 6, 2 and totals 10 and 11 it gives 4, 4, 2 and then
// 5, 5, 1, taking a unit from the third claim as the total grows.
//
// Phase 2 (surplus). When the demands add up to total or less, every claim
// gets its demand, and the surplus S = total − Σ dᵢ is split over all claims
// by weight, uncapped, by the same rule: floor(S·wᵢ/Σw) each, then one unit at
// a time to the smallest (tᵢ+1)/wᵢ, where tᵢ is the claim's part of S.
//
// # Guarantees
//
// For claims within the bounds below, the result r has these properties:
//
//  1. len(r) == len(claims); Σ rᵢ == total when len(claims) > 0.
//  2. Capped: if any claim gets less than its demand (rⱼ < dⱼ), no claim gets
//     more than its demand (rᵢ ≤ dᵢ for all i). Otherwise rᵢ ≥ dᵢ for all i.
//  3. Balanced: in phase 1, for every claim i and every claim j below its
//     demand, rᵢ/wᵢ ≤ (rⱼ+1)/wⱼ: moving one unit from i to j would not make
//     j's share per weight exceed i's. So for any two claims i and j below
//     their demands, |rᵢ/wᵢ − rⱼ/wⱼ| ≤ max(1/wᵢ, 1/wⱼ) < 1/wᵢ + 1/wⱼ. In
//     phase 2 the same holds for the parts of the surplus: tᵢ/wᵢ ≤ (tⱼ+1)/wⱼ
//     for all i, j.
//  4. At least the fair share: rᵢ ≥ floor(min(dᵢ, λ·wᵢ)) in phase 1, so a
//     claim whose demand is at most its fair level (dᵢ ≤ λ·wᵢ) gets exactly
//     its demand; tᵢ ≥ floor(S·wᵢ/Σw) in phase 2. (A claim may get more than
//     ceil(λ·wᵢ): the remainder favours heavier weights, the price of 5.)
//  5. Monotone: for at least one claim, FairShare(total+1, claims) is
//     FairShare(total, claims) with exactly one claim one unit higher; so
//     raising total never lowers any claim's result.
//  6. Deterministic: the result depends on claims only through their values;
//     reordering claims with distinct Names reorders the result the same way.
//     Claims with equal Names are ordered by position.
//
// Bounds: total and every Demand in [0, math.MaxInt64], every Weight in
// [1, MaxWeight], at most MaxClaims claims. FairShare panics, with a message
// starting "division: ", on a negative total, a negative Demand or a Weight
// out of range; these are programmer errors, since callers validate their
// input. Zero claims give an empty result for any total.
//
// It runs in O(n log n) time for n claims and allocates O(n).
func FairShare(total int64, claims []Claim) []int64 {
	if total < 0 {
		panic(fmt.Sprintf("division: total is %d, want at least 0", total))
	}
	checkCount(len(claims))
	for i, c := range claims {
		checkWeight(i, c.Name, c.Weight)
		if c.Demand < 0 {
			panic(fmt.Sprintf("division: claims[%d] (%q): Demand is %d, want at least 0", i, c.Name, c.Demand))
		}
	}
	out := make([]int64, len(claims))
	if len(claims) == 0 {
		return out
	}

	// Do the demands fit? The sum stops growing once it passes total, so it
	// never exceeds 2^64 (two values below 2^63).
	var sum uint64
	fits := true
	for _, c := range claims {
		sum += uint64(c.Demand)
		if sum > uint64(total) {
			fits = false
			break
		}
	}
	if fits {
		surplus(out, claims, uint64(total)-sum)
		return out
	}
	fill(out, claims, uint64(total))
	return out
}

// fill is phase 1: water-filling of total over claims whose demands add up
// to more than total.
func fill(out []int64, claims []Claim, total uint64) {
	// Visit claims by demand per weight, lowest first: a claim is satisfied at
	// the level λ exactly when every claim before it in this order is too.
	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ca, cb := claims[a], claims[b]
		if c := cmpProducts(uint64(ca.Demand), uint64(cb.Weight), uint64(cb.Demand), uint64(ca.Weight)); c != 0 {
			return c
		}
		return byName(ca.Name, cb.Name, a, b)
	})

	var w uint64 // weight of the claims not yet satisfied
	for _, c := range claims {
		w += uint64(c.Weight)
	}
	t := total // units for the claims not yet satisfied
	k := 0
	for ; k < len(order); k++ {
		c := claims[order[k]]
		// Satisfied when dₖ/wₖ ≤ t/w, the level if no later claim is.
		if cmpProducts(uint64(c.Demand), w, t, uint64(c.Weight)) > 0 {
			break
		}
		out[order[k]] = c.Demand
		t -= uint64(c.Demand) // dₖ ≤ t·wₖ/w ≤ t
		w -= uint64(c.Weight)
	}
	rest := order[k:]
	if len(rest) == 0 {
		return // unreachable: the demands add up to more than total
	}

	// λ = t/w for the rest, each strictly below its demand.
	h := make(claimHeap, 0, len(rest))
	left := t
	for _, i := range rest {
		c := claims[i]
		hi, lo := bits.Mul64(t, uint64(c.Weight))
		q, _ := bits.Div64(hi, lo, w) // q ≤ t: wᵢ ≤ w
		left -= q
		out[i] = int64(q)
		h = append(h, unit{i: i, got: int64(q), limit: c.Demand, weight: c.Weight, name: c.Name})
	}
	h.give(left)
	for _, u := range h {
		out[u.i] = u.got
	}
}

// surplus is phase 2: every demand is met and s units remain, split over all
// claims by weight, uncapped.
func surplus(out []int64, claims []Claim, s uint64) {
	var w uint64
	for _, c := range claims {
		w += uint64(c.Weight)
	}
	h := make(claimHeap, 0, len(claims))
	left := s
	for i, c := range claims {
		hi, lo := bits.Mul64(s, uint64(c.Weight))
		q, _ := bits.Div64(hi, lo, w) // q ≤ s: wᵢ ≤ w
		left -= q
		h = append(h, unit{i: i, got: int64(q), limit: Unbounded, weight: c.Weight, name: c.Name})
	}
	h.give(left)
	for _, u := range h {
		// dᵢ + tᵢ ≤ Σd + s = total, so this does not overflow.
		out[u.i] = claims[u.i].Demand + u.got
	}
}

// unit tracks one claim while the remainder is handed out.
type unit struct {
	i      int
	got    int64
	limit  int64
	weight int64
	name   string
}

// claimHeap orders claims by the level their next unit would bring them to,
// (got+1)/weight, lowest first, then by name and position.
type claimHeap []unit

// Len is part of heap.Interface.
func (h claimHeap) Len() int { return len(h) }

// Less is part of heap.Interface: the lower next level first.
func (h claimHeap) Less(a, b int) bool {
	ua, ub := h[a], h[b]
	// got+1 ≤ 2^63 and weights ≤ 2^32: the products fit 128 bits.
	if c := cmpProducts(uint64(ua.got)+1, uint64(ub.weight), uint64(ub.got)+1, uint64(ua.weight)); c != 0 {
		return c < 0
	}
	return byName(ua.name, ub.name, ua.i, ub.i) < 0
}

// Swap is part of heap.Interface.
func (h claimHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }

// Push is part of heap.Interface; give never grows the heap.
func (h *claimHeap) Push(x any) { *h = append(*h, x.(unit)) }

// Pop is part of heap.Interface. It shrinks the slice without clearing the
// element, which give relies on to keep every claim in the backing array.
func (h *claimHeap) Pop() any {
	old := *h
	u := old[len(old)-1]
	*h = old[:len(old)-1]
	return u
}

// give hands n units out one at a time to the claim with the lowest
// (got+1)/weight among those below their limit. n is less than the number of
// claims, since each lost less than one unit to rounding down, so this costs
// O(n log n). On return h holds every claim, in some order.
func (h *claimHeap) give(n uint64) {
	if n == 0 {
		return
	}
	all := *h
	heap.Init(h)
	for ; n > 0 && h.Len() > 0; n-- {
		top := &(*h)[0]
		top.got++
		if top.got < top.limit {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h) // full: it stays in all, past the heap's end
		}
	}
	*h = all
}

// FairShareFloat is FairShare for a divisible resource (a rate): the same water level, without rounding.
//
// When the demands add up to more than total, claim i gets min(dᵢ, λ·wᵢ)
// with Σ min(dᵢ, λ·wᵢ) = total. Otherwise it gets dᵢ + S·wᵢ/Σw, where
// S = total − Σ dᵢ is the surplus. So claims below their demand have equal
// rᵢ/wᵢ = λ, and a claim with dᵢ ≤ λ·wᵢ gets dᵢ. Each result, the sum and
// monotonicity in total hold to within floating-point rounding (tested to
// 1e-9 of total against the exact values in math/big); in phase 1 no claim
// exceeds its demand at all, since the result is clamped to it.
// The order in which claims are visited depends only on their values and
// Names, so reordering claims with distinct Names reorders the result
// bit-for-bit.
//
// Bounds: total finite and at least 0; every Demand at least 0 and not NaN
// (math.Inf(1) for none); every Weight in [1, MaxWeight]; at most MaxClaims
// claims. FairShareFloat panics, with a message starting "division: ",
// otherwise.
func FairShareFloat(total float64, claims []ClaimFloat) []float64 {
	if !(total >= 0) || math.IsInf(total, 1) {
		panic(fmt.Sprintf("division: total is %v, want a finite number at least 0", total))
	}
	checkCount(len(claims))
	for i, c := range claims {
		checkWeight(i, c.Name, c.Weight)
		if !(c.Demand >= 0) {
			panic(fmt.Sprintf("division: claims[%d] (%q): Demand is %v, want at least 0", i, c.Name, c.Demand))
		}
	}
	out := make([]float64, len(claims))
	if len(claims) == 0 {
		return out
	}

	order := make([]int, len(claims))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ca, cb := claims[a], claims[b]
		if c := cmp.Compare(ca.Demand/float64(ca.Weight), cb.Demand/float64(cb.Weight)); c != 0 {
			return c
		}
		return byName(ca.Name, cb.Name, a, b)
	})
	var w int64 // exact: at most MaxClaims·MaxWeight
	var demands float64
	for _, i := range order {
		w += claims[i].Weight
		demands += claims[i].Demand
	}

	if demands <= total {
		s := total - demands
		for i, c := range claims {
			out[i] = c.Demand + s*float64(c.Weight)/float64(w)
		}
		return out
	}

	t := total
	k := 0
	for ; k < len(order); k++ {
		c := claims[order[k]]
		if c.Demand/float64(c.Weight) > t/float64(w) {
			break
		}
		out[order[k]] = c.Demand
		t = max(0, t-c.Demand) // rounding must not make the level negative
		w -= c.Weight
	}
	if k == len(order) {
		return out // every demand fit after all, within rounding
	}
	level := t / float64(w)
	for _, i := range order[k:] {
		c := claims[i]
		out[i] = min(c.Demand, level*float64(c.Weight))
	}
	return out
}

func checkCount(n int) {
	if n > MaxClaims {
		panic(fmt.Sprintf("division: %d claims, want at most %d", n, MaxClaims))
	}
}

func checkWeight(i int, name string, weight int64) {
	if weight < 1 || weight > MaxWeight {
		panic(fmt.Sprintf("division: claims[%d] (%q): Weight is %d, want 1 to %d", i, name, weight, MaxWeight))
	}
}

// byName is the tie rule: the smaller Name first, then the earlier claim.
func byName(na, nb string, a, b int) int {
	if c := strings.Compare(na, nb); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// cmpProducts compares a·b with c·d exactly, in 128 bits.
func cmpProducts(a, b, c, d uint64) int {
	xhi, xlo := bits.Mul64(a, b)
	yhi, ylo := bits.Mul64(c, d)
	if r := cmp.Compare(xhi, yhi); r != 0 {
		return r
	}
	return cmp.Compare(xlo, ylo)
}
