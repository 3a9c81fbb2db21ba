package lossmodel

import "fmt"

// Sizing is the smallest reserve that reaches a target, with what it
// admits.
type Sizing struct {
	// Reserve is the smallest R whose scenario admits at least the target
	// fraction of what the global gate admits; Found is false when even
	// the largest reserve, LargestReserve, does not.
	Reserve int
	Found   bool
	// Comparison is the scenario with that reserve (with LargestReserve
	// when not Found) beside its global gate.
	Comparison Comparison
}

// LargestReserve is the largest reserve the operator keeps out of A
// permits divided over pods pods: A − P, so that every pod keeps a permit
// of its own (a larger spec.reserve is cut to it), and 0 when A ≤ P.
func LargestReserve(permits, pods int) int { return max(permits-pods, 0) }

// SmallestReserve finds the smallest reserve with which s admits at least
// target (such as 0.99) of what its global gate admits. It bisects over
// 0..LargestReserve(A, P), taking admission to grow with the reserve,
// which holds there up to the sampling noise: near the target, a
// neighbour of the answer may do as well. It looks no further because the
// operator cuts a larger reserve to A − P, leaving every pod a permit of
// its own: a scenario beyond it is not one a quota can run.
func SmallestReserve(s Scenario, target float64) (Sizing, error) {
	if !(target > 0 && target <= 1) {
		return Sizing{}, fmt.Errorf("lossmodel: target: must be a fraction in (0, 1], got %v", target)
	}
	global, err := Simulate(s.GlobalGate())
	if err != nil {
		return Sizing{}, err
	}
	at := func(r int) (Comparison, error) {
		t := s
		t.Reserve = r
		res, err := Simulate(t)
		return Comparison{Scenario: res, Global: global}, err
	}
	most := LargestReserve(s.Permits, s.Pods)
	top, err := at(most)
	if err != nil {
		return Sizing{}, err
	}
	if top.Ratio() < target {
		return Sizing{Reserve: most, Comparison: top}, nil
	}
	lo, hi, best := -1, most, top // at(lo) misses, at(hi) reaches
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		c, err := at(mid)
		if err != nil {
			return Sizing{}, err
		}
		if c.Ratio() >= target {
			hi, best = mid, c
		} else {
			lo = mid
		}
	}
	return Sizing{Reserve: hi, Found: true, Comparison: best}, nil
}
