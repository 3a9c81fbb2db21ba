package report

import (
	"fmt"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// AmplificationTolerance is how far, in attempts per request, the measured
// retry amplification of a phase may be from the sizing model's fixed point
// for the same capacity and arrival rate: 5 percentage points.
const AmplificationTolerance = 0.05

// PhaseAmplification is the retry amplification measured over one phase's
// window (after its settle time), and what the sizing model behind
// `kubectl backpressure retry` predicts for the same capacity and arrival
// rate.
//
// Measured: every call that reaches the downstream in the window is an
// attempt (it counts its 200s, 429s, abandoned calls and the change of its
// calls in flight); the requests are those sent in the window that the
// downstream answered, directly or after the gateway's retries (a 200, or a
// 502 carrying the downstream's error). A request the gate shed is left out
// of both when its first attempt was shed, and its failed attempt is counted
// when only its retry was: a shed carries no sign of which it was, so the
// sheds are reported beside the figure, which is exact when they are 0.
//
// Model: capacity = contract / the phase's latency (a downstream with no
// queue completes at most that many calls per second), arrival = the
// requests per second above, sizing.Amplification with the gateway's retry
// limit.
type PhaseAmplification struct {
	Phase           string  `json:"phase"`
	MeasuredSeconds float64 `json:"measuredSeconds"`
	// Requests, Attempts and Shed are counted over the window.
	Requests int64 `json:"requests"`
	Attempts int64 `json:"attempts"`
	Shed     int64 `json:"shed"`
	// Rejected counts the downstream's 429s in the window.
	Rejected int64 `json:"rejected"`
	// Measured is Attempts / Requests.
	Measured float64 `json:"measured"`
	// MeasuredRejection is Rejected / Attempts: the fraction of attempts
	// the downstream rejected.
	MeasuredRejection float64 `json:"measuredRejection"`
	// CapacityPerSecond, ArrivalPerSecond and MaxRetries are the model's
	// inputs: `kubectl backpressure retry --capacity … --arrival …
	// --retries …`.
	CapacityPerSecond float64 `json:"capacityPerSecond"`
	ArrivalPerSecond  float64 `json:"arrivalPerSecond"`
	MaxRetries        int     `json:"maxRetries"`
	// SingleRound and FixedPoint are the model's attempts per request.
	SingleRound float64 `json:"singleRound"`
	FixedPoint  float64 `json:"fixedPoint"`
	// FixedPointRejection is the model's rejected fraction of attempts at
	// its fixed point, p = 1 − capacity / attempt rate.
	FixedPointRejection float64 `json:"fixedPointRejection"`
}

// RejectionAgrees says whether the fraction of attempts the downstream
// rejected is within AmplificationTolerance of the model's fixed point.
func (a PhaseAmplification) RejectionAgrees() bool {
	d := a.MeasuredRejection - a.FixedPointRejection
	return a.Attempts > 0 && d <= AmplificationTolerance && d >= -AmplificationTolerance
}

// Agrees says whether the measured amplification is within
// AmplificationTolerance of the model's fixed point.
func (a PhaseAmplification) Agrees() bool {
	d := a.Measured - a.FixedPoint
	return a.Requests > 0 && d <= AmplificationTolerance && d >= -AmplificationTolerance
}

// Exact says whether the gates shed at most 1 % of the requests, so that
// the sheds cannot move Measured by more than about a point.
func (a PhaseAmplification) Exact() bool { return a.Requests > 0 && 100*a.Shed <= a.Requests }

// Command returns the kubectl backpressure command that computes the model.
func (a PhaseAmplification) Command() string {
	return fmt.Sprintf("kubectl backpressure retry --capacity %.1f --arrival %.1f --retries %d", a.CapacityPerSecond, a.ArrivalPerSecond, a.MaxRetries)
}

// retryAmplification measures every phase of a run whose retries no budget
// limits, as the model assumes; it returns nil for other runs.
func retryAmplification(d *RunData) []PhaseAmplification {
	if d.Plan == nil || d.Plan.RetryBudgetPerSecond < d.Schedule.RequestsPerSecond || len(d.Samples) == 0 {
		return nil
	}
	var out []PhaseAmplification
	for _, p := range d.Schedule.Phases {
		from, to := p.Window()
		a, b := at(d.Samples, from), at(d.Samples, to)
		if b.At <= a.At {
			continue
		}
		pa := PhaseAmplification{
			Phase:             p.Name,
			MeasuredSeconds:   (b.At - a.At).Seconds(),
			Attempts:          arrivals(b.Downstream) - arrivals(a.Downstream),
			Rejected:          b.Downstream.Rejected - a.Downstream.Rejected,
			MaxRetries:        d.MaxRetries,
			CapacityPerSecond: float64(d.Downstream.Contract) / d.Schedule.LatencyAt(a.At).Seconds(),
		}
		for _, rec := range d.Load.Records {
			if rec.At < a.At || rec.At >= b.At {
				continue
			}
			switch rec.Outcome {
			case traffic.OutcomeOK, traffic.OutcomeDownstreamError:
				pa.Requests++
			case traffic.OutcomeShed:
				pa.Shed++
			}
		}
		if pa.Requests == 0 {
			out = append(out, pa)
			continue
		}
		pa.Measured = float64(pa.Attempts) / float64(pa.Requests)
		if pa.Attempts > 0 {
			pa.MeasuredRejection = float64(pa.Rejected) / float64(pa.Attempts)
		}
		pa.ArrivalPerSecond = float64(pa.Requests) / pa.MeasuredSeconds
		if m, err := sizing.Amplification(sizing.RetryLoad{
			CapacityPerSecond: pa.CapacityPerSecond,
			ArrivalPerSecond:  pa.ArrivalPerSecond,
			MaxRetries:        pa.MaxRetries,
		}); err == nil {
			pa.SingleRound, pa.FixedPoint = m.SingleRound.Amplification, m.FixedPoint.Amplification
			pa.FixedPointRejection = m.FixedPoint.Rejection
		}
		out = append(out, pa)
	}
	return out
}

// arrivals returns the calls the downstream has received: answered,
// rejected, abandoned or in flight.
func arrivals(c traffic.DownstreamCounts) int64 { return c.OK + c.Rejected + c.Abandoned + c.InFlight }
