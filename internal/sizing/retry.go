package sizing

import "math"

// Limits of the fixed-point iteration of Amplification.
const (
	// AmplificationTolerance ends the iteration once the amplification
	// factor moves less than this from one round to the next.
	AmplificationTolerance = 1e-4
	// MaxRounds bounds the iteration.
	MaxRounds = 100
)

// RetryLoad is an arrival rate offered to a capacity by callers that retry
// rejected calls.
type RetryLoad struct {
	// CapacityPerSecond is the calls per second the capacity accepts, Cap
	// (greater than 0, at most MaxRate).
	CapacityPerSecond float64
	// ArrivalPerSecond is the rate of first attempts, λ (greater than 0, at
	// most MaxRate).
	ArrivalPerSecond float64
	// MaxRetries is the most retries of one call, r (0..MaxCount).
	MaxRetries int
}

// Round is the state of retry amplification after one round.
type Round struct {
	// Rejection is p = max(0, 1 − Cap/λatt) for the attempt rate of the
	// round before (λ in the first round).
	Rejection float64
	// Amplification is A = 1 + p + … + p^r = (1 − p^(r+1)) / (1 − p),
	// the attempts per call.
	Amplification float64
	// AttemptRatePerSecond is λatt = λ·A.
	AttemptRatePerSecond float64
}

// AmplificationResult is how far retries multiply the load on a capacity.
type AmplificationResult struct {
	// SingleRound is the first round: the estimate that uses p0 = 1 − Cap/λ.
	SingleRound Round
	// FixedPoint is the last round: where the iteration settled, or stopped
	// after MaxRounds.
	FixedPoint Round
	// Rounds lists every round, the first being SingleRound and the last
	// FixedPoint.
	Rounds []Round
	// Converged says whether the amplification moved less than
	// AmplificationTolerance in the last round.
	Converged bool
	// DivergentWithoutLimit says that with no retry limit the attempt rate
	// would grow without bound: λ > Cap, and retries create no capacity.
	DivergentWithoutLimit bool
}

// Amplification iterates λatt = λ·A(p), p = max(0, 1 − Cap/λatt) from
// λatt = λ, round by round, until A moves less than AmplificationTolerance
// or MaxRounds have run. The attempt rate never falls from one round to the
// next, and stays within [λ, λ·(r+1)].
func Amplification(l RetryLoad) (AmplificationResult, error) {
	if err := positiveRateIn("CapacityPerSecond", l.CapacityPerSecond); err != nil {
		return AmplificationResult{}, err
	}
	if err := positiveRateIn("ArrivalPerSecond", l.ArrivalPerSecond); err != nil {
		return AmplificationResult{}, err
	}
	if err := countIn("MaxRetries", l.MaxRetries, 0); err != nil {
		return AmplificationResult{}, err
	}
	res := AmplificationResult{DivergentWithoutLimit: l.ArrivalPerSecond > l.CapacityPerSecond}
	attempts, prevA := l.ArrivalPerSecond, 1.0
	for range MaxRounds {
		accepted := l.CapacityPerSecond / attempts
		a := amplification(accepted, l.MaxRetries)
		attempts = l.ArrivalPerSecond * a
		res.Rounds = append(res.Rounds, Round{
			Rejection:            max(0, 1-accepted),
			Amplification:        a,
			AttemptRatePerSecond: attempts,
		})
		if math.Abs(a-prevA) < AmplificationTolerance {
			res.Converged = true
			break
		}
		prevA = a
	}
	res.SingleRound = res.Rounds[0]
	res.FixedPoint = res.Rounds[len(res.Rounds)-1]
	return res, nil
}

// amplification returns the attempts per call, 1 + p + … + p^r with
// p = 1 − q, for the accepted fraction q = Cap/λatt. It is written as
// −expm1((r+1)·log1p(−q)) / q so that a q near 0, where 1 − p rounds to 0
// and the textbook form divides 0 by 0, still gives a value near r+1.
func amplification(q float64, retries int) float64 {
	if q >= 1 {
		return 1
	}
	if q <= 0 {
		return float64(retries) + 1
	}
	a := -math.Expm1(float64(retries+1)*math.Log1p(-q)) / q
	return min(max(a, 1), float64(retries)+1)
}
