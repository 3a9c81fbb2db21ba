package storm

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
)

// partialCall is one call of the partial-load scenario: when it arrives,
// how long the downstream takes for it, and the pod the balancer sends it
// to. The same call goes to the operator's pods, the global gate and the
// equal shares (common random numbers).
type partialCall struct {
	At      time.Duration
	Latency time.Duration
	Pod     int
}

// The seed's streams for the calls (the model keeps its own streams: the
// prediction and the measurement share their parameters and the pinned
// weights, not their draws).
const (
	streamPartialArrivals = 11
	streamPartialRouting  = 12
)

// partialCalls draws the calls of d: Poisson arrivals at perSecond,
// lognormal latencies of the given mean and coefficient of variation, and
// each call's pod among pods: uniform for lossmodel.Random, by the pinned
// weights (lossmodel.Weights of seed and skew) for lossmodel.Pinned.
func partialCalls(seed uint64, balancer lossmodel.Balancer, pods int, skew, perSecond float64, mean time.Duration, cv float64, d time.Duration) []partialCall {
	arrivals := rand.New(rand.NewPCG(seed, streamPartialArrivals))
	routing := rand.New(rand.NewPCG(seed, streamPartialRouting))
	var cumulative []float64
	if balancer == lossmodel.Pinned {
		var sum float64
		for _, w := range lossmodel.Weights(seed, pods, skew) {
			sum += w
			cumulative = append(cumulative, sum)
		}
	}
	sigma2 := math.Log(1 + cv*cv)
	mu, sigma := math.Log(mean.Seconds())-sigma2/2, math.Sqrt(sigma2)
	var calls []partialCall
	for t := arrivals.ExpFloat64() / perSecond; t < d.Seconds(); t += arrivals.ExpFloat64() / perSecond {
		latency := time.Duration(math.Exp(mu+sigma*arrivals.NormFloat64()) * float64(time.Second)).Round(time.Microsecond)
		pod := 0
		if cumulative == nil {
			pod = routing.IntN(pods)
		} else {
			u := routing.Float64() * cumulative[len(cumulative)-1]
			for pod < pods-1 && u >= cumulative[pod] {
				pod++
			}
		}
		calls = append(calls, partialCall{At: time.Duration(t * float64(time.Second)), Latency: latency, Pod: pod})
	}
	return calls
}
