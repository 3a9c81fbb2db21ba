package sizing

// SweepRow is the sizing at one divisor of a sweep.
type SweepRow struct {
	// Replicas is the divisor.
	Replicas int
	// Result is the sizing at it.
	Result Result
}

// SweepResult is the sizing at every divisor from a minimum to a maximum
// replica count, as an HPA may choose any of them.
type SweepResult struct {
	// Rows holds one sizing per divisor, in increasing order.
	Rows []SweepRow
	// LastWithPermit is A, the usable permits (floor(C'·s), or a shared
	// contract caller's part): the largest divisor at which each pod still
	// gets a whole permit; 0 when none does.
	LastWithPermit int
	// FirstBelowOne is the first divisor of the sweep at which the share
	// falls below one permit per pod; 0 when every divisor of the sweep
	// gives a whole permit.
	FirstBelowOne int
}

// Sweep sizes in at every divisor from minReplicas to
// maxReplicas; in.Divisor is ignored. The range may cover at most MaxSweep
// divisors.
func Sweep(in Input, minReplicas, maxReplicas int) (SweepResult, error) {
	if err := countIn("MinReplicas", minReplicas, 1); err != nil {
		return SweepResult{}, err
	}
	if err := countIn("MaxReplicas", maxReplicas, minReplicas); err != nil {
		return SweepResult{}, err
	}
	if span := int64(maxReplicas) - int64(minReplicas) + 1; span > MaxSweep {
		return SweepResult{}, inputErr("MaxReplicas", "must be within %d of MinReplicas %d, got %d (%d divisors)",
			MaxSweep-1, minReplicas, maxReplicas, span)
	}
	in.Divisor = minReplicas
	if err := in.Validate(); err != nil {
		return SweepResult{}, err
	}

	res := SweepResult{Rows: make([]SweepRow, 0, maxReplicas-minReplicas+1)}
	for n := minReplicas; n <= maxReplicas; n++ {
		in.Divisor = n
		r, err := Size(in)
		if err != nil {
			return SweepResult{}, err
		}
		res.Rows = append(res.Rows, SweepRow{Replicas: n, Result: r})
	}
	// A does not depend on the divisor.
	res.LastWithPermit = int(res.Rows[0].Result.Usable)
	if first := max(minReplicas, res.LastWithPermit+1); first <= maxReplicas {
		res.FirstBelowOne = first
	}
	return res, nil
}
