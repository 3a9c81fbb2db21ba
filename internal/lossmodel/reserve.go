package lossmodel

import "fmt"

// Sizing is the smallest reserve that reaches a target, with what it
// admits.
type Sizing struct {
	// Reserve is the smallest R whose scenario admits at least the target
	// fraction of what the global gate admits; Found is false when even
	// R = A does not. Under BorrowWaiting an all-reserve scenario admits
	// at least what one gate does, as the permit server's queue is bounded
	// in time only, so that takes a target near 1 and sampling noise; under
	// BorrowInRoom or BorrowOnce a pod without permits has no waiting room,
	// and the all-reserve scenario can fall short of one gate with a room.
	Reserve int
	Found   bool
	// Comparison is the scenario with that reserve (with R = A when not
	// Found) beside its global gate.
	Comparison Comparison
}

// SmallestReserve finds the smallest reserve with which s admits at least
// target (such as 0.99) of what its global gate admits. It bisects over
// 0..A, taking admission to grow with the reserve, which holds up to the
// sampling noise: near the target, a neighbour of the answer may do as
// well.
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
	top, err := at(s.Permits)
	if err != nil {
		return Sizing{}, err
	}
	if top.Ratio() < target {
		return Sizing{Reserve: s.Permits, Comparison: top}, nil
	}
	lo, hi, best := -1, s.Permits, top // at(lo) misses, at(hi) reaches
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
