package division

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestFairShare(t *testing.T) {
	const u = Unbounded
	tests := []struct {
		name   string
		total  int64
		claims []Claim
		want   []int64
	}{{
		name:   "no claims",
		total:  10,
		claims: nil,
		want:   []int64{},
	}, {
		name:   "nothing to share",
		total:  0,
		claims: []Claim{{"a", 1, u}, {"b", 3, 5}},
		want:   []int64{0, 0},
	}, {
		// 10/3 = 3.33 each; the spare unit goes to the smallest Name.
		name:   "equal weights, unbounded",
		total:  10,
		claims: []Claim{{"b", 1, u}, {"a", 1, u}, {"c", 1, u}},
		want:   []int64{3, 4, 3},
	}, {
		name:   "weights 2:1",
		total:  9,
		claims: []Claim{{"a", 2, u}, {"b", 1, u}},
		want:   []int64{6, 3},
	}, {
		// λ = 4: a is capped at 2, the other two share the remaining 8.
		name:   "a small demand is met, the rest is water-filled",
		total:  10,
		claims: []Claim{{"a", 1, 2}, {"b", 1, u}, {"c", 1, u}},
		want:   []int64{2, 4, 4},
	}, {
		// λ = 3: a's demand of exactly 3 is its fair level.
		name:   "demand equal to the fair level",
		total:  9,
		claims: []Claim{{"a", 1, 3}, {"b", 1, u}, {"c", 1, u}},
		want:   []int64{3, 3, 3},
	}, {
		// Weighted levels: a (w=1, d=1) is capped; the level over b and c,
		// (20−1)/(2+3) = 3.8, would give b 7.6, above its demand 7, so b is
		// capped too and c gets the other 12 (λ = 4).
		name:   "weighted with caps",
		total:  20,
		claims: []Claim{{"a", 1, 1}, {"b", 2, 7}, {"c", 3, u}},
		want:   []int64{1, 7, 12},
	}, {
		name:   "demand zero",
		total:  5,
		claims: []Claim{{"a", 1, 0}, {"b", 1, u}},
		want:   []int64{0, 5},
	}, {
		name:   "demands exactly the total",
		total:  6,
		claims: []Claim{{"a", 1, 1}, {"b", 5, 2}, {"c", 1, 3}},
		want:   []int64{1, 2, 3},
	}, {
		// Surplus 7 by weight 1:1 = 3.5 each; the spare unit goes to a.
		name:   "surplus split by weight, uncapped",
		total:  10,
		claims: []Claim{{"a", 1, 1}, {"b", 1, 2}},
		want:   []int64{5, 5},
	}, {
		// Surplus 9 by weight 1:2 = 3 and 6.
		name:   "surplus weighted",
		total:  12,
		claims: []Claim{{"a", 1, 3}, {"b", 2, 0}},
		want:   []int64{6, 6},
	}, {
		// λ = 10/14. Floors 4, 4, 1; the spare unit's level (r+1)/w is
		// 5/6 for a and b and 2/2 for c, so a gets it. Largest fractional part
		// (0.29, 0.29, 0.43) would give it to c, which then loses it at 11.
		name:   "Alabama paradox avoided, total 10",
		total:  10,
		claims: []Claim{{"a", 6, u}, {"b", 6, u}, {"c", 2, u}},
		want:   []int64{5, 4, 1},
	}, {
		name:   "Alabama paradox avoided, total 11",
		total:  11,
		claims: []Claim{{"a", 6, u}, {"b", 6, u}, {"c", 2, u}},
		want:   []int64{5, 5, 1},
	}, {
		// λ = 3 with claims of weight 1000 and 1: floors 3000 and 3, remainder 0.
		name:   "heavy weight",
		total:  3003,
		claims: []Claim{{"a", 1000, u}, {"b", 1, u}},
		want:   []int64{3000, 3},
	}, {
		// floor(M/3) and floor(2M/3) leave one unit; its level is
		// (floor(M/3)+1)/1 for a and (floor(2M/3)+1)/2 for b, lower, so b.
		name:   "largest total",
		total:  math.MaxInt64,
		claims: []Claim{{"a", 1, u}, {"b", 2, u}},
		want:   []int64{3074457345618258602, 6148914691236517205},
	}, {
		name:   "one unbounded claim takes the largest total",
		total:  math.MaxInt64,
		claims: []Claim{{"a", 1, u}, {"b", 7, 0}},
		want:   []int64{math.MaxInt64, 0},
	}, {
		// Products of demands near 2^63 and weights near 2^32 need 128 bits.
		name:   "largest weights and demands",
		total:  math.MaxInt64 - 1,
		claims: []Claim{{"a", MaxWeight, math.MaxInt64 - 2}, {"b", MaxWeight - 1, u}, {"c", 1, 1}},
		want:   nil, // checked by invariants only; see below
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FairShare(tt.total, tt.claims)
			if tt.want != nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("FairShare(%d, %v) mismatch (-want +got):\n%s", tt.total, tt.claims, diff)
				}
			}
			for _, e := range checkFairShare(tt.total, tt.claims, got) {
				t.Errorf("FairShare(%d, %v) = %v: %s", tt.total, tt.claims, got, e)
			}
		})
	}
}

func TestFairSharePanics(t *testing.T) {
	tests := []struct {
		name   string
		total  int64
		claims []Claim
		want   string
	}{
		{"negative total", -1, nil, "division: total is -1"},
		{"weight zero", 1, []Claim{{"a", 0, 1}}, `division: claims[0] ("a"): Weight is 0`},
		{"weight too large", 1, []Claim{{"a", 1, 1}, {"b", MaxWeight + 1, 1}}, `division: claims[1] ("b"): Weight is 4294967297`},
		{"negative demand", 1, []Claim{{"a", 1, -2}}, `division: claims[0] ("a"): Demand is -2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := panicMessage(func() { FairShare(tt.total, tt.claims) })
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("FairShare(%d, %v) panicked with %q, want a message starting %q", tt.total, tt.claims, got, tt.want)
			}
		})
	}
}

func TestFairShareFloatPanics(t *testing.T) {
	tests := []struct {
		name   string
		total  float64
		claims []ClaimFloat
		want   string
	}{
		{"negative total", -1, nil, "division: total is -1"},
		{"NaN total", math.NaN(), nil, "division: total is NaN"},
		{"infinite total", math.Inf(1), nil, "division: total is +Inf"},
		{"weight zero", 1, []ClaimFloat{{"a", 0, 1}}, `division: claims[0] ("a"): Weight is 0`},
		{"negative demand", 1, []ClaimFloat{{"a", 1, -0.5}}, `division: claims[0] ("a"): Demand is -0.5`},
		{"NaN demand", 1, []ClaimFloat{{"a", 1, math.NaN()}}, `division: claims[0] ("a"): Demand is NaN`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := panicMessage(func() { FairShareFloat(tt.total, tt.claims) })
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("FairShareFloat(%v, %v) panicked with %q, want a message starting %q", tt.total, tt.claims, got, tt.want)
			}
		})
	}
}

func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return "no panic"
}

// TestFairShareMatchesReference compares FairShare with handing out every
// unit one at a time, for every total from 0 up, which also checks that each
// extra unit of total raises exactly one claim by one.
func TestFairShareMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const cases = 10_000
	for n := range cases {
		claims := randomSmallClaims(rng)
		maxTotal := rng.Int64N(300)
		want := reference(maxTotal, claims)
		// Check a few totals against the reference, the largest in full.
		for _, total := range []int64{rng.Int64N(maxTotal + 1), maxTotal} {
			got := FairShare(total, claims)
			if total == maxTotal {
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("case %d: FairShare(%d, %v) mismatch with the unit-by-unit reference (-want +got):\n%s", n, total, claims, diff)
				}
			} else if diff := cmp.Diff(reference(total, claims), got); diff != "" {
				t.Fatalf("case %d: FairShare(%d, %v) mismatch with the unit-by-unit reference (-want +got):\n%s", n, total, claims, diff)
			}
			for _, e := range checkFairShare(total, claims, got) {
				t.Fatalf("case %d: FairShare(%d, %v) = %v: %s", n, total, claims, got, e)
			}
		}
	}
}

// TestFairShareInvariants checks every guarantee on random claims across the
// whole input range, where the reference would be too slow.
func TestFairShareInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const cases = 10_000
	for n := range cases {
		claims := randomLargeClaims(rng)
		total := randomTotal(rng, claims)
		got := FairShare(total, claims)
		for _, e := range checkFairShare(total, claims, got) {
			t.Fatalf("case %d: FairShare(%d, %v) = %v: %s", n, total, claims, got, e)
		}
		if e := checkMonotone(total, claims, got); e != "" {
			t.Fatalf("case %d: %s", n, e)
		}
		perm := rng.Perm(len(claims))
		if e := checkPermuted(total, claims, got, perm); e != "" {
			t.Fatalf("case %d: %s", n, e)
		}
	}
}

// reference hands out total one unit at a time: while some claim is below its
// demand, to the one whose next unit has the lowest (r+1)/w; then the surplus
// to the lowest (t+1)/w over all claims. Ties go to the smaller Name, then the
// earlier claim. Values must be small enough for int64 products.
func reference(total int64, claims []Claim) []int64 {
	r := make([]int64, len(claims))
	if len(claims) == 0 {
		return r
	}
	first := func(got []int64, capped bool) int {
		best := -1
		for i, c := range claims {
			if capped && got[i] >= c.Demand {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			a, b := (got[i]+1)*claims[best].Weight, (got[best]+1)*c.Weight
			if a < b || a == b && c.Name < claims[best].Name {
				best = i
			}
		}
		return best
	}
	left := total
	for ; left > 0; left-- {
		i := first(r, true)
		if i < 0 {
			break
		}
		r[i]++
	}
	extra := make([]int64, len(claims))
	for ; left > 0; left-- {
		extra[first(extra, false)]++
	}
	for i := range r {
		r[i] += extra[i]
	}
	return r
}

// checkFairShare returns a description of every guarantee of FairShare that
// got breaks, computed with math/big and an independent way of finding the
// level.
func checkFairShare(total int64, claims []Claim, got []int64) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(got) != len(claims) {
		fail("%d results for %d claims", len(got), len(claims))
		return errs
	}
	if len(claims) == 0 {
		return errs
	}
	sum, demands, weights := new(big.Int), new(big.Int), new(big.Int)
	for i, c := range claims {
		sum.Add(sum, big.NewInt(got[i]))
		demands.Add(demands, big.NewInt(c.Demand))
		weights.Add(weights, big.NewInt(c.Weight))
		if got[i] < 0 {
			fail("claim %d got %d, below 0", i, got[i])
		}
	}
	if sum.Cmp(big.NewInt(total)) != 0 {
		fail("results add up to %v, want the total %d", sum, total)
	}
	if len(errs) > 0 {
		return errs
	}

	phase1 := demands.Cmp(big.NewInt(total)) > 0
	if !phase1 {
		// Every demand met; the surplus is split by weight.
		s := new(big.Int).Sub(big.NewInt(total), demands)
		part := make([]int64, len(claims))
		for i, c := range claims {
			if got[i] < c.Demand {
				fail("claim %d got %d, below its demand %d, though the demands fit", i, got[i], c.Demand)
				return errs
			}
			part[i] = got[i] - c.Demand
			// tᵢ ≥ floor(S·wᵢ/Σw).
			fair := new(big.Int).Mul(s, big.NewInt(c.Weight))
			fair.Quo(fair, weights)
			if big.NewInt(part[i]).Cmp(fair) < 0 {
				fail("claim %d got %d of the surplus %v, below floor(S·w/Σw) = %v", i, part[i], s, fair)
			}
		}
		checkBalance(claims, part, func(int) bool { return true }, fail)
		return errs
	}

	below := func(j int) bool { return got[j] < claims[j].Demand }
	for i, c := range claims {
		if got[i] > c.Demand {
			fail("claim %d got %d, above its demand %d, while the demands do not fit", i, got[i], c.Demand)
		}
	}
	checkBalance(claims, got, below, fail)

	// |rᵢ/wᵢ − rⱼ/wⱼ| < 1/wᵢ + 1/wⱼ among claims below their demands, that is
	// |rᵢ·wⱼ − rⱼ·wᵢ| < wⱼ + wᵢ. Pairwise, so only for a few claims.
	if len(claims) <= 24 {
		for i := range claims {
			for j := range claims {
				if i == j || !below(i) || !below(j) {
					continue
				}
				d := new(big.Int).Mul(big.NewInt(got[i]), big.NewInt(claims[j].Weight))
				d.Sub(d, new(big.Int).Mul(big.NewInt(got[j]), big.NewInt(claims[i].Weight)))
				if d.Abs(d).Cmp(big.NewInt(claims[i].Weight+claims[j].Weight)) >= 0 {
					fail("claims %d and %d, both below their demands, got %d/%d and %d/%d per weight, at least 1/wᵢ + 1/wⱼ apart",
						i, j, got[i], claims[i].Weight, got[j], claims[j].Weight)
				}
			}
		}
	}

	// rᵢ ≥ floor(min(dᵢ, λ·wᵢ)), and exactly dᵢ when dᵢ ≤ λ·wᵢ.
	lambda := level(total, claims)
	for i, c := range claims {
		fair := new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(c.Weight))
		d := new(big.Rat).SetInt64(c.Demand)
		if d.Cmp(fair) <= 0 {
			if got[i] != c.Demand {
				fail("claim %d has demand %d at most its fair level %v, but got %d", i, c.Demand, fair.FloatString(3), got[i])
			}
			continue
		}
		floor := new(big.Int).Quo(fair.Num(), fair.Denom())
		if big.NewInt(got[i]).Cmp(floor) < 0 {
			fail("claim %d got %d, below the floor of its fair level %v", i, got[i], fair.FloatString(3))
		}
	}
	return errs
}

// checkBalance checks rᵢ/wᵢ ≤ (rⱼ+1)/wⱼ for every claim i with rᵢ > 0 and
// every claim j for which open(j): the highest level any claim reached is at
// most the lowest level an open claim's next unit would bring it to.
func checkBalance(claims []Claim, r []int64, open func(int) bool, fail func(string, ...any)) {
	hi, lo := -1, -1
	var hiLevel, loLevel *big.Rat
	for i, c := range claims {
		if r[i] > 0 {
			l := big.NewRat(r[i], c.Weight)
			if hi < 0 || l.Cmp(hiLevel) > 0 {
				hi, hiLevel = i, l
			}
		}
		if open(i) {
			l := new(big.Rat).SetFrac(new(big.Int).Add(big.NewInt(r[i]), big.NewInt(1)), big.NewInt(c.Weight))
			if lo < 0 || l.Cmp(loLevel) < 0 {
				lo, loLevel = i, l
			}
		}
	}
	if hi >= 0 && lo >= 0 && hiLevel.Cmp(loLevel) > 0 {
		fail("claim %d is at %d/%d per weight, above claim %d's next level (%d+1)/%d",
			hi, r[hi], claims[hi].Weight, lo, r[lo], claims[lo].Weight)
	}
}

// level finds the water level λ with Σ min(dᵢ, λ·wᵢ) = total for claims whose
// demands add up to more than total, the way Doorman's rounds do but until
// nothing changes: share what is left over the claims not yet satisfied, mark
// those the share satisfies, repeat.
func level(total int64, claims []Claim) *big.Rat {
	satisfied := make([]bool, len(claims))
	for {
		left, weight := big.NewInt(total), new(big.Int)
		for i, c := range claims {
			if satisfied[i] {
				left.Sub(left, big.NewInt(c.Demand))
			} else {
				weight.Add(weight, big.NewInt(c.Weight))
			}
		}
		lambda := new(big.Rat).SetFrac(left, weight)
		changed := false
		for i, c := range claims {
			if !satisfied[i] && new(big.Rat).SetInt64(c.Demand).Cmp(new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(c.Weight))) <= 0 {
				satisfied[i] = true
				changed = true
			}
		}
		if !changed {
			return lambda
		}
	}
}

// checkMonotone checks that total+1 raises exactly one claim by one unit.
func checkMonotone(total int64, claims []Claim, got []int64) string {
	if total == math.MaxInt64 || len(claims) == 0 {
		return ""
	}
	next := FairShare(total+1, claims)
	raised := 0
	for i := range got {
		switch next[i] - got[i] {
		case 0:
		case 1:
			raised++
		default:
			return fmt.Sprintf("FairShare(%d, %v) = %v, then %v at one more: claim %d moved by %d", total, claims, got, next, i, next[i]-got[i])
		}
	}
	if raised != 1 {
		return fmt.Sprintf("FairShare(%d, %v) = %v, then %v at one more: %d claims raised, want 1", total, claims, got, next, raised)
	}
	return ""
}

// checkPermuted checks that reordering claims by perm reorders the result the
// same way, when Names are distinct.
func checkPermuted(total int64, claims []Claim, got []int64, perm []int) string {
	seen := make(map[string]bool, len(claims))
	for _, c := range claims {
		if seen[c.Name] {
			return ""
		}
		seen[c.Name] = true
	}
	shuffled := make([]Claim, len(claims))
	want := make([]int64, len(claims))
	for i, p := range perm {
		shuffled[i] = claims[p]
		want[i] = got[p]
	}
	if diff := cmp.Diff(want, FairShare(total, shuffled)); diff != "" {
		return fmt.Sprintf("FairShare(%d, %v) depends on the order of claims (-want +got):\n%s", total, shuffled, diff)
	}
	return ""
}

// randomSmallClaims returns up to 12 claims with small weights and demands,
// some unbounded, and Names from a small set so that ties and equal Names
// occur.
func randomSmallClaims(rng *rand.Rand) []Claim {
	claims := make([]Claim, rng.IntN(13))
	maxWeight := int64(5)
	if rng.IntN(4) == 0 {
		maxWeight = 1000
	}
	for i := range claims {
		claims[i] = Claim{
			Name:   string(rune('a' + rng.IntN(16))),
			Weight: 1 + rng.Int64N(maxWeight),
			Demand: rng.Int64N(60),
		}
		if rng.IntN(6) == 0 {
			claims[i].Demand = Unbounded
		}
	}
	return claims
}

// randomLargeClaims returns up to 40 claims with Names distinct unless a
// duplicate is drawn on purpose, across the whole range of weights and
// demands.
func randomLargeClaims(rng *rand.Rand) []Claim {
	claims := make([]Claim, rng.IntN(41))
	for i := range claims {
		c := Claim{Name: fmt.Sprintf("c%03d", rng.IntN(1000)), Weight: randomWeight(rng)}
		switch rng.IntN(5) {
		case 0:
			c.Demand = Unbounded
		case 1:
			c.Demand = rng.Int64N(100)
		case 2:
			c.Demand = rng.Int64N(math.MaxInt64 / 64)
		default:
			c.Demand = rng.Int64N(1 << 31)
		}
		claims[i] = c
	}
	return claims
}

func randomWeight(rng *rand.Rand) int64 {
	switch rng.IntN(4) {
	case 0:
		return 1
	case 1:
		return MaxWeight - rng.Int64N(3)
	case 2:
		return 1 + rng.Int64N(MaxWeight)
	default:
		return 1 + rng.Int64N(1000)
	}
}

// randomTotal returns a total below, near or above the claims' demands.
func randomTotal(rng *rand.Rand, claims []Claim) int64 {
	var demands int64
	for _, c := range claims {
		if c.Demand > math.MaxInt64-demands {
			demands = math.MaxInt64
			break
		}
		demands += c.Demand
	}
	switch rng.IntN(6) {
	case 0:
		return rng.Int64N(1000)
	case 1:
		return rng.Int64N(math.MaxInt64)
	case 2:
		return math.MaxInt64 - rng.Int64N(2)
	default:
		// Around the sum of the demands, where phase 1 becomes phase 2.
		d := rng.Int64N(2001) - 1000
		if demands > math.MaxInt64-1000 {
			return math.MaxInt64 - 1000 + min(d, 0)
		}
		return max(0, demands+d)
	}
}

func BenchmarkFairShare(b *testing.B) {
	for _, n := range []int{3, 1000} {
		rng := rand.New(rand.NewPCG(5, 6))
		claims := make([]Claim, n)
		var demands int64
		for i := range claims {
			claims[i] = Claim{Name: fmt.Sprintf("workload-%04d", i), Weight: 1 + rng.Int64N(10), Demand: 1 + rng.Int64N(1000)}
			demands += claims[i].Demand
		}
		total := demands * 2 / 3 // binding, so water-filling does real work
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				FairShare(total, claims)
			}
		})
	}
}

func BenchmarkFairShareFloat(b *testing.B) {
	for _, n := range []int{3, 1000} {
		rng := rand.New(rand.NewPCG(5, 6))
		claims := make([]ClaimFloat, n)
		var demands float64
		for i := range claims {
			claims[i] = ClaimFloat{Name: fmt.Sprintf("workload-%04d", i), Weight: 1 + rng.Int64N(10), Demand: 1 + 1000*rng.Float64()}
			demands += claims[i].Demand
		}
		total := demands * 2 / 3
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				FairShareFloat(total, claims)
			}
		})
	}
}

func TestFairShareFloat(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name   string
		total  float64
		claims []ClaimFloat
		want   []float64
	}{{
		name:  "no claims",
		total: 5,
		want:  []float64{},
	}, {
		name:   "nothing to share",
		total:  0,
		claims: []ClaimFloat{{"a", 1, inf}, {"b", 2, 3}},
		want:   []float64{0, 0},
	}, {
		name:   "equal weights",
		total:  0.3,
		claims: []ClaimFloat{{"a", 1, inf}, {"b", 1, inf}, {"c", 1, inf}},
		want:   []float64{0.1, 0.1, 0.1},
	}, {
		// a is capped at 10; λ = 90/3 = 30 for b and c.
		name:   "a small demand is met, the rest is water-filled",
		total:  100,
		claims: []ClaimFloat{{"a", 1, 10}, {"b", 1, inf}, {"c", 2, inf}},
		want:   []float64{10, 30, 60},
	}, {
		// λ = 100/4 = 25 gives b 25 > 20, so b is capped; then λ = 80/3.
		name:   "weighted with caps",
		total:  100,
		claims: []ClaimFloat{{"a", 3, inf}, {"b", 1, 20}},
		want:   []float64{80, 20},
	}, {
		// Surplus 70 by weight 1:3.
		name:   "surplus split by weight, uncapped",
		total:  100,
		claims: []ClaimFloat{{"a", 1, 10}, {"b", 3, 20}},
		want:   []float64{27.5, 72.5},
	}, {
		name:   "demands exactly the total",
		total:  7.5,
		claims: []ClaimFloat{{"a", 1, 2.5}, {"b", 9, 5}},
		want:   []float64{2.5, 5},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FairShareFloat(tt.total, tt.claims)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("FairShareFloat(%v, %v) mismatch (-want +got):\n%s", tt.total, tt.claims, diff)
			}
		})
	}
}

// TestFairShareFloatInvariants compares FairShareFloat with the exact level,
// found in rounds with math/big, on random claims, and checks that it is
// capped, monotone and independent of the claims' order.
func TestFairShareFloatInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const cases = 10_000
	for n := range cases {
		claims := make([]ClaimFloat, rng.IntN(30))
		var demands float64
		for i := range claims {
			c := ClaimFloat{Name: fmt.Sprintf("c%03d", i), Weight: randomWeight(rng)}
			switch rng.IntN(4) {
			case 0:
				c.Demand = math.Inf(1)
			case 1:
				c.Demand = math.Ldexp(rng.Float64(), rng.IntN(60)-20)
			default:
				c.Demand = 1000 * rng.Float64()
			}
			demands += c.Demand
			claims[i] = c
		}
		var total float64
		switch {
		case rng.IntN(3) == 0 && !math.IsInf(demands, 1):
			total = demands * (0.9 + 0.2*rng.Float64())
		case rng.IntN(2) == 0:
			total = 1e4 * rng.Float64()
		default:
			total = math.Ldexp(rng.Float64(), rng.IntN(100))
		}
		got := FairShareFloat(total, claims)
		for _, e := range checkFairShareFloat(total, claims, got) {
			t.Fatalf("case %d: FairShareFloat(%v, %v) = %v: %s", n, total, claims, got, e)
		}

		more := total * (1 + rng.Float64())
		next := FairShareFloat(more, claims)
		for i := range got {
			if next[i] < got[i]-1e-9*total {
				t.Fatalf("case %d: FairShareFloat(%v, %v) = %v, then %v at %v: claim %d went down", n, total, claims, got, next, more, i)
			}
		}

		perm := rng.Perm(len(claims))
		shuffled := make([]ClaimFloat, len(claims))
		want := make([]float64, len(claims))
		for i, p := range perm {
			shuffled[i], want[i] = claims[p], got[p]
		}
		if diff := cmp.Diff(want, FairShareFloat(total, shuffled)); diff != "" {
			t.Fatalf("case %d: FairShareFloat(%v, %v) depends on the order of claims (-want +got):\n%s", n, total, shuffled, diff)
		}
	}
}

// checkFairShareFloat compares got with the exact result, computed with
// math/big from the level found in rounds, within 1e-9 of total.
func checkFairShareFloat(total float64, claims []ClaimFloat, got []float64) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(got) != len(claims) {
		return []string{fmt.Sprintf("%d results for %d claims", len(got), len(claims))}
	}
	if len(claims) == 0 {
		return nil
	}
	tol := 1e-9 * total
	rat := func(f float64) *big.Rat { return new(big.Rat).SetFloat64(f) }
	demands, weights := new(big.Rat), new(big.Rat)
	finite := true
	for _, c := range claims {
		weights.Add(weights, new(big.Rat).SetInt64(c.Weight))
		if math.IsInf(c.Demand, 1) {
			finite = false
		} else {
			demands.Add(demands, rat(c.Demand))
		}
	}
	want := make([]*big.Rat, len(claims))
	phase1 := !finite || demands.Cmp(rat(total)) > 0
	if !phase1 {
		s := new(big.Rat).Sub(rat(total), demands)
		for i, c := range claims {
			want[i] = new(big.Rat).Mul(s, new(big.Rat).SetFrac64(c.Weight, 1))
			want[i].Quo(want[i], weights).Add(want[i], rat(c.Demand))
		}
	} else {
		satisfied := make([]bool, len(claims))
		var lambda *big.Rat
		for changed := true; changed; {
			left, weight := rat(total), new(big.Rat)
			for i, c := range claims {
				if satisfied[i] {
					left.Sub(left, rat(c.Demand))
				} else {
					weight.Add(weight, new(big.Rat).SetInt64(c.Weight))
				}
			}
			lambda = left.Quo(left, weight)
			changed = false
			for i, c := range claims {
				if !satisfied[i] && !math.IsInf(c.Demand, 1) && rat(c.Demand).Cmp(new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(c.Weight))) <= 0 {
					satisfied[i], changed = true, true
				}
			}
		}
		for i, c := range claims {
			if satisfied[i] {
				want[i] = rat(c.Demand)
			} else {
				want[i] = new(big.Rat).Mul(lambda, new(big.Rat).SetInt64(c.Weight))
			}
		}
	}
	var sum float64
	for i, c := range claims {
		sum += got[i]
		if !(got[i] >= 0) {
			fail("claim %d got %v", i, got[i])
		}
		if phase1 && got[i] > c.Demand {
			fail("claim %d got %v, above its demand %v, while the demands do not fit", i, got[i], c.Demand)
		}
		w, _ := want[i].Float64()
		if math.Abs(got[i]-w) > tol {
			fail("claim %d got %v, want %v within %v", i, got[i], w, tol)
		}
	}
	if math.Abs(sum-total) > tol {
		fail("results add up to %v, want %v within %v", sum, total, tol)
	}
	return errs
}
