package division_test

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
)

// endHeap is the end times of one pod's calls in flight.
type endHeap []float64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// steadyPod is one pod of the steady-load model.
type steadyPod struct {
	share    int64
	inFlight endHeap
	area     float64 // ∫ calls in flight dt since the last scrape
	last     float64 // when area was last brought up to date
	shed     int     // calls shed since the last scrape
	demand   float64 // the smoothed demand, in permits
}

func (p *steadyPod) advance(t float64) {
	p.area += float64(len(p.inFlight)) * (t - p.last)
	p.last = t
}

// steadyChanges runs the model of a caller's pods under steady offered
// load for d and returns the times (seconds) at which the division by
// demand changed after warmUp, and the last division.
//
// The model: Poisson arrivals at load × permits / mean latency per
// second; latencies lognormal (mean 220 ms, cv 0.5); a pod receives a call
// with probability weights[p]; a call runs at once when its pod holds a
// free permit, else it is shed. Every scrape interval each pod's demand is
// measured as the library's metric states it — calls in flight (time
// average over the interval) plus calls shed times the mean latency (the
// permits they would have held), smoothed by an exponential average of
// time constant smooth — and the controller divides with follow over
// the demands rounded up. The new shares apply
// at once: the handover's delay, which only slows moves, is left out.
func steadyChanges(follow division.Follow, seed uint64, permits int64, weights []float64, load float64, d, warmUp time.Duration) ([]float64, []int64) {
	const (
		meanLatency = 0.220
		cv          = 0.5
		scrape      = 10.0 // seconds between demand readings and divisions
		smooth      = 60.0 // seconds, the demand's exponential average
	)
	sigma := math.Sqrt(math.Log(1 + cv*cv))
	mu := math.Log(meanLatency) - sigma*sigma/2
	rate := load * float64(permits) / meanLatency
	rng := rand.New(rand.NewPCG(seed, 7))

	pods := make([]*steadyPod, len(weights))
	claimants := make([]division.Claimant, len(weights))
	for i := range pods {
		pods[i] = &steadyPod{}
		claimants[i] = division.Claimant{Key: string(rune('a' + i)), Serving: true, Demand: -1}
	}
	divide := func() []int64 {
		shares := follow.Targets(permits, claimants)
		for i, s := range shares {
			pods[i].share = s
			claimants[i].Previous = s
		}
		return shares
	}
	prev := divide()
	var changes []float64
	alpha := 1 - math.Exp(-scrape/smooth)
	end := d.Seconds()
	nextScrape := scrape
	for t := rng.ExpFloat64() / rate; t < end; t += rng.ExpFloat64() / rate {
		for t >= nextScrape {
			for i, p := range pods {
				for len(p.inFlight) > 0 && p.inFlight[0] <= nextScrape {
					p.advance(p.inFlight[0])
					heap.Pop(&p.inFlight)
				}
				p.advance(nextScrape)
				measured := p.area/scrape + float64(p.shed)*meanLatency/scrape
				if nextScrape == scrape {
					p.demand = measured
				} else {
					p.demand += alpha * (measured - p.demand)
				}
				p.area, p.shed = 0, 0
				claimants[i].Demand = int64(math.Ceil(p.demand))
			}
			if shares := divide(); !slices.Equal(shares, prev) {
				if nextScrape > warmUp.Seconds() {
					changes = append(changes, nextScrape)
				}
				prev = shares
			}
			nextScrape += scrape
		}
		u, pod := rng.Float64(), len(pods)-1
		for i, w := range weights {
			if u < w {
				pod = i
				break
			}
			u -= w
		}
		p := pods[pod]
		for len(p.inFlight) > 0 && p.inFlight[0] <= t {
			p.advance(p.inFlight[0])
			heap.Pop(&p.inFlight)
		}
		p.advance(t)
		if int64(len(p.inFlight)) < p.share {
			heap.Push(&p.inFlight, t+math.Exp(mu+sigma*rng.NormFloat64()))
		} else {
			p.shed++
		}
	}
	return changes, prev
}

// TestFollowSteadyLoad: under steady offered load (80 % of what the
// permits serve) with Poisson noise, the division by demand changes at
// most once in any minute once it has found the demand, for a random
// balancer (equal demands, all noise) and pinned connections (lasting
// imbalance); and with pinned connections it does follow: the pods that
// receive more calls hold more permits (the weights are the loss model's
// and the storm's, lossmodel.Weights). This is a seeded model of the
// pods and the controller (steadyChanges), not the storm: 40 permits, 8
// pods, 30 minutes after a 5-minute warm-up, for several seeds.
func TestFollowSteadyLoad(t *testing.T) {
	const permits, npods = 40, 8
	even := make([]float64, npods)
	for i := range even {
		even[i] = 1.0 / npods
	}
	for _, c := range []struct {
		name    string
		weights []float64
	}{
		{"random", even},
		{"pinned σ 0.8", lossmodel.Weights(1, npods, 0.8)},
		{"pinned σ 0.8, another draw", lossmodel.Weights(2, npods, 0.8)},
	} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(3) {
				changes, shares := steadyChanges(division.DefaultFollow, seed, permits, c.weights, 0.8, 35*time.Minute, 5*time.Minute)
				for i := 1; i < len(changes); i++ {
					if gap := changes[i] - changes[i-1]; gap < 60 {
						t.Errorf("seed %d: the division changed at %.0f s and again at %.0f s, %.0f s later (changes at %v)", seed, changes[i-1], changes[i], gap, changes)
					}
				}
				t.Logf("seed %d: %d changes in 30 minutes, at %v; shares %v for weights %.3f", seed, len(changes), changes, shares, c.weights)
				// Following: a pod with at least three times another's
				// part of the calls holds more permits than it (the band
				// may leave closer pods level), and the busiest pod at
				// least its calls in flight, w × 80 % × 40.
				heaviest := 0
				for i := range shares {
					if c.weights[i] > c.weights[heaviest] {
						heaviest = i
					}
					for j := range shares {
						if c.weights[i] >= 3*c.weights[j] && shares[i] <= shares[j] {
							t.Errorf("seed %d: pod %d receives %.3f of the calls and pod %d %.3f, but their shares are %d and %d", seed, i, c.weights[i], j, c.weights[j], shares[i], shares[j])
						}
					}
				}
				if need := math.Ceil(c.weights[heaviest] * 0.8 * permits); float64(shares[heaviest]) < need {
					t.Errorf("seed %d: the busiest pod receives %.3f of the calls, %.0f in flight, and holds %d permits", seed, c.weights[heaviest], need, shares[heaviest])
				}
			}
		})
	}
}

// TestFollowSteadyLoadWithoutBand: the same model with no band moves the
// division more than once a minute — the noise TestFollowSteadyLoad's
// band absorbs is there to absorb.
func TestFollowSteadyLoadWithoutBand(t *testing.T) {
	noBand := division.Follow{Floor: 1}
	changes, _ := steadyChanges(noBand, 0, 40, lossmodel.Weights(1, 8, 0.8), 0.8, 35*time.Minute, 5*time.Minute)
	within := 0
	for i := 1; i < len(changes); i++ {
		if changes[i]-changes[i-1] < 60 {
			within++
		}
	}
	if within == 0 {
		t.Fatalf("without a band the division changed %d times in 30 minutes, never twice in a minute: %v", len(changes), changes)
	}
	t.Logf("without a band: %d changes in 30 minutes, %d within a minute of the one before", len(changes), within)
}
