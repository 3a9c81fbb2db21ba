package storm

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// PartialLoadReport is the partial-load scenario's figures, one run per
// balancer. Its JSON form is the file report-partial-load.json beside the
// storm's report.
type PartialLoadReport struct {
	Random *PartialLoadRun `json:"random,omitempty"`
	Pinned *PartialLoadRun `json:"pinned,omitempty"`
	// BrokerKilled is the run with the permit server killed mid-run.
	BrokerKilled *BrokerKillRun `json:"brokerKilled,omitempty"`
}

// Empty says whether no run has been recorded.
func (r *PartialLoadReport) Empty() bool {
	return r.Random == nil && r.Pinned == nil && r.BrokerKilled == nil
}

// WriteJSON writes the report to path, creating its directory.
func (r *PartialLoadReport) WriteJSON(path string) error { return report.WriteJSON(path, r) }

// PartialLoadRun is one run of the partial-load scenario: the operator's
// pods (equal shares of what the reserve leaves, borrowing from it), one
// global gate of the usable permits and equal shares without a reserve,
// all fed the same calls, and the model's prediction for each. Every count
// is of the calls that arrived after the warm-up.
type PartialLoadRun struct {
	Balancer string `json:"balancer"`
	Pods     int    `json:"pods"`
	// Usable, Reserve and Contract are the quota's permits: usable, pooled
	// in the reserve, and the downstream's contract.
	Usable   int `json:"usable"`
	Reserve  int `json:"reserve"`
	Contract int `json:"contract"`
	// OfferedLoad is a fraction of what the usable permits serve, at
	// CallsPerSecond.
	OfferedLoad     float64 `json:"offeredLoad"`
	CallsPerSecond  float64 `json:"callsPerSecond"`
	WarmupSeconds   float64 `json:"warmupSeconds"`
	MeasuredSeconds float64 `json:"measuredSeconds"`
	// Calls were sent after the warm-up; Late of them more than 20ms after
	// their time (the harness fell behind).
	Calls int64 `json:"calls"`
	Late  int64 `json:"late"`
	// Admitted, Shed and Failed are the pods' answers: the downstream's,
	// a fallback, anything else.
	Admitted int64 `json:"admitted"`
	Shed     int64 `json:"shed"`
	Failed   int64 `json:"failed"`
	// GlobalGateAdmitted and EqualSharesAdmitted are what the in-process
	// gates admitted of the same calls.
	GlobalGateAdmitted  int64 `json:"globalGateAdmitted"`
	EqualSharesAdmitted int64 `json:"equalSharesAdmitted"`
	// AdmittedRatioToGlobalGate is Admitted ÷ GlobalGateAdmitted;
	// EqualSharesRatioToGlobalGate is EqualSharesAdmitted ÷ the same.
	AdmittedRatioToGlobalGate    float64 `json:"admittedRatioToGlobalGate"`
	EqualSharesRatioToGlobalGate float64 `json:"equalSharesRatioToGlobalGate"`
	// PeakInFlight and Downstream429 are the downstream's, over the whole
	// run.
	PeakInFlight  int64 `json:"peakInFlight"`
	Downstream429 int64 `json:"downstream429"`
	// GateAdmitted and Borrowed are the pods' gates' counters: calls
	// admitted on the pods' own permits and on a borrowed one;
	// BorrowedFraction is Borrowed ÷ (GateAdmitted + Borrowed).
	GateAdmitted     int64   `json:"gateAdmitted"`
	Borrowed         int64   `json:"borrowed"`
	BorrowedFraction float64 `json:"borrowedFraction"`
	// NotLent and BorrowFailed are the borrows the permit server refused
	// (nothing to lend) and those it did not answer within the budget.
	NotLent      int64 `json:"notLent"`
	BorrowFailed int64 `json:"borrowFailed"`
	// LoansReturnedEarly counts the borrowed calls whose loans went back
	// before they ended, the calls going on on their pods' own permits
	// (--reserve-return-early).
	LoansReturnedEarly int64 `json:"loansReturnedEarly"`
	// LentOut counts the permits the pods lent out, through the permit
	// server, to other pods' calls when the reserve was lent out
	// (--reserve-offer): those calls are among Borrowed.
	LentOut int64 `json:"lentOut"`
	// LeasesExpired counts the permit server's leases that ended at the
	// end of their time, not returned: a permit lent to nobody until then
	// (a grant whose answer reached the pod after the pod gave up). Not
	// set for the run with the server killed, whose first replica's
	// counts go with it.
	LeasesExpired *int64 `json:"leasesExpired,omitempty"`
	// OffersGranted, OffersRefused and OffersTimedOut count the permit
	// server's asks of offering pods by outcome: granted, refused (the
	// pod had lent its spare meanwhile), or not answered within the ask's
	// timeout. Not set, as LeasesExpired, for the run with the server
	// killed.
	OffersGranted  int64 `json:"offersGranted,omitempty"`
	OffersRefused  int64 `json:"offersRefused,omitempty"`
	OffersTimedOut int64 `json:"offersTimedOut,omitempty"`
	// PredictedRatio, PredictedEqualSharesRatio and
	// PredictedBorrowedFraction are internal/lossmodel's for the same
	// parameters (the operator's with shares that follow demand).
	PredictedRatio            float64 `json:"predictedRatio"`
	PredictedEqualSharesRatio float64 `json:"predictedEqualSharesRatio"`
	PredictedBorrowedFraction float64 `json:"predictedBorrowedFraction"`
	// PredictedOwnRoomsRatio is the model's ratio with the operator's
	// earlier rule, which sized a pod's waiting room for its own permits
	// only, leaving the scenario's pods of about 3 without one
	// (lossmodel.RoomOwnPermits).
	PredictedOwnRoomsRatio float64 `json:"predictedOwnRoomsRatio"`
	// PredictedRatioGivenShares is PredictedRatio given the shares the
	// pods held (MeanShares, rounded to the permits outside the reserve),
	// which the model does not know.
	PredictedRatioGivenShares float64 `json:"predictedRatioGivenShares"`
	// DivisionChanges counts the moves of the division after the warm-up:
	// a plan that lowers a share starts one, and the plan that raises the
	// others as the lowered pods let go completes it (see divisionMoves).
	DivisionChanges          int     `json:"divisionChanges"`
	DivisionChangesPerMinute float64 `json:"divisionChangesPerMinute"`
	// ShortestMoveGapSeconds is the shortest time between two of those
	// moves; 0 with fewer than two.
	ShortestMoveGapSeconds float64 `json:"shortestMoveGapSeconds,omitempty"`
	// MeanShares are the permits the plans gave each pod, averaged over
	// the measured time, in the balancer's order (pod i receives the i-th
	// part of the calls); PredictedShares the model's shares, in the same
	// order. A gap between the two is the demand-following the model
	// assumes and the operator's reading of the pods' demand did not give.
	MeanShares      []float64 `json:"meanShares,omitempty"`
	PredictedShares []int     `json:"predictedShares,omitempty"`
}

// PartialPrediction is the model's prediction for the partial-load
// scenario with one balancer.
type PartialPrediction struct {
	// Ratio is the operator's pods (what the reserve leaves divided by
	// demand, the reserve lent per call) against the global gate;
	// EqualSharesRatio equal shares without a reserve against it.
	Ratio, EqualSharesRatio float64
	// BorrowedFraction is the operator's calls admitted on a borrowed
	// permit over its admitted calls.
	BorrowedFraction float64
	// OwnRoomsRatio is Ratio under the earlier rule
	// (lossmodel.RoomOwnPermits).
	OwnRoomsRatio float64
	// Shares are the permits the model gives each pod.
	Shares []int
}

// partialScenario is the scenario's model (internal/lossmodel) without a
// reserve: its permits, pods, load, latency, waiting rooms (the plan's
// rule, from the quota's sizing), balancer, skew and seed; withReserve
// adds the reserve, shares that follow demand and the pods' lending rules.
func partialScenario(b lossmodel.Balancer) (s lossmodel.Scenario, withReserve func(*lossmodel.Scenario), err error) {
	sz, err := quota.Size(PartialQuotaSpec(), PartialPods)
	if err != nil {
		return s, nil, err
	}
	s = lossmodel.Scenario{
		Permits: Usable(), Pods: PartialPods, Load: PartialLoad,
		Latency:       lossmodel.Latency{Mean: PartialLatency, CV: PartialLatencyCV},
		Balancer:      b,
		MaxQueueWait:  sz.Result.PerPod.MaxQueueWait,
		QueueCapacity: func(permits int) int { return sz.Result.ShareFor(permits).QueueCapacity },
		Seed:          PartialSeed,
	}
	if b == lossmodel.Pinned {
		s.Skew = PartialSkew
	}
	return s, func(s *lossmodel.Scenario) {
		s.Reserve, s.Sharing, s.Floor = PartialReserve, lossmodel.DemandShares, 1
		s.GiveLoansBack, s.AskAfter, s.OfferIdle = true, PartialAskAfter, true
	}, nil
}

// PredictPartialLoad runs internal/lossmodel with the scenario's
// parameters (partialScenario): equal shares without a reserve, and the
// operator's reserve, shares and lending rules with the waiting rooms the
// plan gives (counting the reserve) and with rooms of own permits.
func PredictPartialLoad(b lossmodel.Balancer) (PartialPrediction, error) {
	s, withReserve, err := partialScenario(b)
	if err != nil {
		return PartialPrediction{}, err
	}
	equal, err := lossmodel.Compare(s)
	if err != nil {
		return PartialPrediction{}, err
	}
	withReserve(&s)
	reserve, err := lossmodel.Compare(s)
	if err != nil {
		return PartialPrediction{}, err
	}
	s.WaitingRoom = lossmodel.RoomOwnPermits
	ownRooms, err := lossmodel.Compare(s)
	if err != nil {
		return PartialPrediction{}, err
	}
	return PartialPrediction{Ratio: reserve.Ratio(), EqualSharesRatio: equal.Ratio(), BorrowedFraction: reserve.Scenario.BorrowedFraction(),
		OwnRoomsRatio: ownRooms.Ratio(), Shares: s.Shares()}, nil
}

// RatioGiven is the model's ratio (the operator's rooms, reserve and
// lending rules) when the pods hold held, the shares the operator gave
// them, rather than the model's: how much of a run's distance from the
// prediction its shares explain.
func RatioGiven(b lossmodel.Balancer, held []int) (float64, error) {
	s, withReserve, err := partialScenario(b)
	if err != nil {
		return 0, err
	}
	withReserve(&s)
	s.PodShares = held
	c, err := lossmodel.Compare(s)
	if err != nil {
		return 0, err
	}
	return c.Ratio(), nil
}

// roundShares rounds mean shares to whole permits summing to total, by
// the largest remainders (ties to the earlier pod).
func roundShares(mean []float64, total int) []int {
	out := make([]int, len(mean))
	order := make([]int, len(mean))
	left := total
	for i, m := range mean {
		out[i], order[i] = int(m), i
		left -= out[i]
	}
	sort.SliceStable(order, func(a, b int) bool {
		return mean[order[a]]-float64(out[order[a]]) > mean[order[b]]-float64(out[order[b]])
	})
	for k := 0; left > 0 && len(order) > 0; k = (k + 1) % len(order) {
		out[order[k]]++
		left--
	}
	for k := len(order) - 1; left < 0 && k >= 0; k-- {
		if out[order[k]] > 0 {
			out[order[k]]--
			left++
		}
	}
	return out
}

// BrokerKillRun is the run with the permit server killed. Offsets are
// seconds from the start of the load.
type BrokerKillRun struct {
	// Run is the whole run's figures (peak in flight, 429s, counts after
	// the warm-up).
	Run *PartialLoadRun `json:"run"`
	// KilledAtSeconds is the SIGKILL; RestartedAtSeconds the start of the
	// new replica's process; MaxLeaseSeconds the servers' --max-lease.
	KilledAtSeconds    float64 `json:"killedAtSeconds"`
	RestartedAtSeconds float64 `json:"restartedAtSeconds"`
	MaxLeaseSeconds    float64 `json:"maxLeaseSeconds"`
	// SamplesBeforeExpiry are the readings of the pods' borrow counters
	// between the kill and the kill plus the longest lease (every lease
	// the killed replica gave has ended by then); GrantsBeforeExpiry of
	// them saw a permit lent since the kill. LastSampleBeforeExpirySeconds
	// is the last such reading.
	SamplesBeforeExpiry           int     `json:"samplesBeforeExpiry"`
	GrantsBeforeExpiry            int     `json:"grantsBeforeExpiry"`
	LastSampleBeforeExpirySeconds float64 `json:"lastSampleBeforeExpirySeconds"`
	// FirstGrantSeconds is the first reading that saw a permit lent since
	// the kill (0 if none did).
	FirstGrantSeconds float64 `json:"firstGrantSeconds"`
	// OutageCalls arrived between the kill and FirstGrantSeconds (or the
	// end); OutageAdmitted of them the pods admitted, on their own shares.
	OutageCalls    int64 `json:"outageCalls"`
	OutageAdmitted int64 `json:"outageAdmitted"`
	// SampleErrors counts readings that failed.
	SampleErrors int `json:"sampleErrors"`
}

// WritePartialLoadTable writes the partial-load figures for a terminal.
func WritePartialLoadTable(w io.Writer, r *PartialLoadReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "balancer\toperator ÷ global gate (model)\tequal shares ÷ global gate (model)\tborrowed (model)\tpeak in flight\t429s\tdivision changes/min\tcalls")
	for _, run := range []*PartialLoadRun{r.Random, r.Pinned} {
		if run == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.3f (%.3f)\t%.3f (%.3f)\t%.3f (%.3f)\t%d (usable %d, contract %d)\t%d\t%.2f\t%d\n",
			run.Balancer, run.AdmittedRatioToGlobalGate, run.PredictedRatio, run.EqualSharesRatioToGlobalGate, run.PredictedEqualSharesRatio,
			run.BorrowedFraction, run.PredictedBorrowedFraction, run.PeakInFlight, run.Usable, run.Contract, run.Downstream429,
			run.DivisionChangesPerMinute, run.Calls)
	}
	if k := r.BrokerKilled; k != nil && k.Run != nil {
		fmt.Fprintf(tw, "\npermit server killed at %.1fs (random)\tnew replica started at %.1fs; readings before kill + longest lease (%.0fs): %d, of which lent: %d; first lent at %.1fs\n",
			k.KilledAtSeconds, k.RestartedAtSeconds, k.MaxLeaseSeconds, k.SamplesBeforeExpiry, k.GrantsBeforeExpiry, k.FirstGrantSeconds)
		fmt.Fprintf(tw, "\toutage: the pods admitted %d of %d calls on their own shares; peak in flight %d, 429s %d\n",
			k.OutageAdmitted, k.OutageCalls, k.Run.PeakInFlight, k.Run.Downstream429)
	}
	return tw.Flush()
}
