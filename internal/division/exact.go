package division

import (
	"cmp"
	"slices"
)

// Exact divides total permits (≥ 0) over the pods named in pods, given the
// permits each holds now (current, aligned with pods; nil means none). It
// returns the permits of each pod, aligned with pods: floor(total/D) for
// every pod and one more for total mod D of them, so the result sums to
// exactly total (D = len(pods) > 0; with no pods it returns nil).
//
// The pods that get the extra permit are those that hold the most now, then
// the first by name: a pod keeps its extra permit while the arithmetic
// stays the same, and when the extra permits move, they go where the
// fewest permits have to move.
func Exact(total int64, pods []string, current []int64) []int64 {
	if len(pods) == 0 {
		return nil
	}
	if total < 0 {
		panic("division: Exact of a negative total")
	}
	d := int64(len(pods))
	base, extra := total/d, total%d
	out := make([]int64, len(pods))
	for i := range out {
		out[i] = base
	}
	if extra == 0 {
		return out
	}
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	held := func(i int) int64 {
		if current == nil {
			return 0
		}
		return current[i]
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(held(b), held(a)), cmp.Compare(pods[a], pods[b]))
	})
	for _, i := range order[:extra] {
		out[i]++
	}
	return out
}

// Member is one pod of a caller, as Targets sees it.
type Member struct {
	// Key identifies the pod; it breaks ties in Exact.
	Key string
	// Serving is set for a pod that is Ready and not leaving: the pods a
	// caller's part is divided over.
	Serving bool
	// Told is what the pod is told now.
	Told int64
}

// Targets returns each member's target, aligned with members: Exact's share
// of total for the serving members, 0 for the others.
func Targets(total int64, members []Member) []int64 {
	var (
		keys []string
		told []int64
		idx  []int
	)
	for i, m := range members {
		if m.Serving {
			keys, told, idx = append(keys, m.Key), append(told, m.Told), append(idx, i)
		}
	}
	out := make([]int64, len(members))
	for j, share := range Exact(total, keys, told) {
		out[idx[j]] = share
	}
	return out
}
