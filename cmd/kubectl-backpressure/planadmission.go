package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/lossmodel"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// admissionFlags are plan's flags for the expected admitted fraction; all
// but --offered-load need it.
var admissionFlags = []string{"balancer", "skew", "reserve", "reserve-target", "return-early", "ask-after", "offer", "offer-keep", "latency-cv", "seed"}

// Defaults of the admission flags: kube-proxy's balancer, the skew and the
// latency spread the partial-load measurement uses.
const (
	defaultBalancer      = lossmodel.Random
	defaultSkew          = 0.8
	defaultLatencyCV     = 0.5
	defaultReserveTarget = "99%"
)

// admissionOptions are the flags of plan's admission figures: what the
// division admits at an offered load, against one global gate of the same
// permits, with equal and demand-following shares, with and without a
// reserve (internal/lossmodel's simulation).
type admissionOptions struct {
	load      string
	balancer  string
	skew      float64
	reserve   string
	target    string
	latencyCV float64
	seed      uint64
	// returnEarly and askAfter are the pods' lending rules
	// (gate.LendRules), as the gateway's and the proxy's
	// --reserve-return-early and --reserve-ask-after set them.
	returnEarly bool
	askAfter    time.Duration
	// offer and offerKeep are the pods offering their idle permits to the
	// permit server (Options.Offer and OfferKeep), as the gateway's and
	// the proxy's --reserve-offer and --reserve-offer-keep set them.
	offer     bool
	offerKeep int
}

func (a *admissionOptions) register(f *pflag.FlagSet) {
	f.StringVar(&a.load, "offered-load", "", "predict the admitted calls at this load, a fraction of what the usable permits serve (usable / latency), such as 80% or 0.8; needs --replicas")
	f.StringVar(&a.balancer, "balancer", string(defaultBalancer), "with --offered-load, how calls reach the pods: round-robin, random (kube-proxy) or pinned (long-lived connections)")
	f.Float64Var(&a.skew, "skew", defaultSkew, "with --balancer pinned, σ of the lognormal per-pod part of the load")
	f.StringVar(&a.reserve, "reserve", "", "with --offered-load, also predict with this reserve: permits lent per call rather than divided, a count such as 8 or a percentage of the usable such as 20%")
	f.StringVar(&a.target, "reserve-target", defaultReserveTarget, "with --offered-load, the part of the global gate's admitted calls to size the smallest reserve for")
	f.Float64Var(&a.latencyCV, "latency-cv", defaultLatencyCV, "with --offered-load, the spread of the latency (standard deviation / mean) of a lognormal around spec.latency.typical")
	f.Uint64Var(&a.seed, "seed", 1, "with --offered-load, the seed of the simulated calls and of the pinned weights")
	f.BoolVar(&a.returnEarly, "return-early", false, "with --offered-load, the pods return a borrowed permit as soon as one of their own is free for its call (the sidecar's --reserve-return-early)")
	f.DurationVar(&a.askAfter, "ask-after", 0, "with --offered-load, a call with a place in its pod's waiting room asks the permit server only after this wait (the sidecar's --reserve-ask-after)")
	f.BoolVar(&a.offer, "offer", false, "with --offered-load, the pods offer their idle permits to the permit server, which lends them when the reserve is lent out (the sidecar's --reserve-offer)")
	f.IntVar(&a.offerKeep, "offer-keep", 0, "with --offer, the permits each pod keeps for its own calls (the sidecar's --reserve-offer-keep)")
}

// check rejects admission flags without --offered-load, and --offered-load
// where plan has no single division to simulate.
func (a *admissionOptions) check(flags *pflag.FlagSet, contract bool) error {
	if !flags.Changed("offered-load") {
		for _, name := range admissionFlags {
			if flags.Changed(name) {
				return fmt.Errorf("--%s: needs --offered-load", name)
			}
		}
		return nil
	}
	switch {
	case contract:
		return errors.New("--offered-load: not with --contract; plan one quota with -f FILE --replicas N")
	case !flags.Changed("replicas"):
		return errors.New("--offered-load: needs --replicas N, the pods to simulate")
	case flags.Changed("skew") && a.balancer != string(lossmodel.Pinned):
		return fmt.Errorf("--skew: only with --balancer %s", lossmodel.Pinned)
	case !(a.skew >= 0):
		return fmt.Errorf("--skew: must be at least 0, got %v", a.skew)
	case !(a.latencyCV >= 0):
		return fmt.Errorf("--latency-cv: must be at least 0, got %v", a.latencyCV)
	case a.askAfter < 0:
		return fmt.Errorf("--ask-after: must not be negative, got %s", a.askAfter)
	case flags.Changed("offer-keep") && !a.offer:
		return errors.New("--offer-keep: only with --offer")
	case a.offerKeep < 0:
		return fmt.Errorf("--offer-keep: must be at least 0, got %d", a.offerKeep)
	case !slices.Contains(lossmodel.Balancers, lossmodel.Balancer(a.balancer)):
		return fmt.Errorf("--balancer: must be %s, %s or %s, got %q", lossmodel.RoundRobin, lossmodel.Random, lossmodel.Pinned, a.balancer)
	}
	if _, err := fraction("offered-load", a.load, 10); err != nil {
		return err
	}
	_, err := fraction("reserve-target", a.target, 1)
	return err
}

// fraction parses a percentage (80%) or a fraction (0.8) in (0, most].
func fraction(flag, s string, most float64) (float64, error) {
	text, isPercent := strings.CutSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if isPercent {
		f /= 100
	}
	if err != nil || !(f > 0 && f <= most) {
		return 0, fmt.Errorf("--%s: must be a percentage such as 80%% or a fraction such as 0.8, above 0 and at most %s, got %q", flag, percent(most), s)
	}
	return f, nil
}

// reservePermits parses --reserve against the usable permits.
func (a *admissionOptions) reservePermits(usable int64) (int, error) {
	if a.reserve == "" {
		return 0, nil
	}
	text, isPercent := strings.CutSuffix(strings.TrimSpace(a.reserve), "%")
	v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err == nil && isPercent && v >= 0 && v <= 100 {
		return int(usable * v / 100), nil
	}
	if err == nil && !isPercent && v >= 0 && v <= usable {
		return int(v), nil
	}
	return 0, fmt.Errorf("--reserve: must be a count of permits from 0 to the %d usable, or a percentage such as 20%%, got %q", usable, a.reserve)
}

// admissionJSON is plan's "admission" object: the admitted fractions the
// simulation predicts.
type admissionJSON struct {
	// OfferedLoad is the fraction of usable / latency offered.
	OfferedLoad    float64  `json:"offeredLoad"`
	CallsPerSecond float64  `json:"callsPerSecond"`
	Balancer       string   `json:"balancer"`
	Skew           *float64 `json:"skew"`
	LatencyCV      float64  `json:"latencyCV"`
	Seed           uint64   `json:"seed"`
	Calls          int      `json:"calls"`
	// ReturnEarly and AskAfter are the pods' lending rules simulated.
	ReturnEarly bool   `json:"returnEarly"`
	AskAfter    string `json:"askAfter"`
	// Offer and OfferKeep are the pods offering their idle permits.
	Offer     bool `json:"offer"`
	OfferKeep int  `json:"offerKeep"`
	// GlobalGate is the admitted fraction of one gate of all the usable
	// permits fed the same calls.
	GlobalGate float64 `json:"globalGate"`
	// Rows are equal and demand-following shares without a reserve, then
	// with --reserve's when given.
	Rows []admissionRowJSON `json:"rows"`
	// SmallestReserve is the reserve that reaches --reserve-target with
	// demand-following shares.
	SmallestReserve reserveSizingJSON `json:"smallestReserve"`
}

type admissionRowJSON struct {
	// Shares is "equal" or "demand".
	Shares            string  `json:"shares"`
	Reserve           int     `json:"reserve"`
	Admitted          float64 `json:"admitted"`
	RatioToGlobalGate float64 `json:"ratioToGlobalGate"`
	// BorrowedFraction is the part of the admitted calls that ran on a
	// reserve permit.
	BorrowedFraction float64 `json:"borrowedFraction"`
	// OfferedFraction is the part of the admitted calls that ran on a
	// permit another pod offered (part of BorrowedFraction).
	OfferedFraction float64 `json:"offeredFraction"`
	// PerPod is each pod's permits.
	PerPod []int `json:"perPod"`
}

type reserveSizingJSON struct {
	Target float64 `json:"target"`
	// Found is false when even the largest reserve the operator keeps
	// (usable − replicas, every pod keeping a permit) falls short;
	// Reserve is then that largest reserve.
	Found             bool    `json:"found"`
	Reserve           int     `json:"reserve"`
	RatioToGlobalGate float64 `json:"ratioToGlobalGate"`
	BorrowedFraction  float64 `json:"borrowedFraction"`
}

// planAdmissionJSON is plan's JSON with the admission object.
type planAdmissionJSON struct {
	planJSON
	Admission admissionJSON `json:"admission"`
}

// predict simulates the quota's division at the offered load.
func (a *admissionOptions) predict(in sizing.Input, res sizing.Result) (admissionJSON, error) {
	load, err := fraction("offered-load", a.load, 10)
	if err != nil {
		return admissionJSON{}, err
	}
	target, err := fraction("reserve-target", a.target, 1)
	if err != nil {
		return admissionJSON{}, err
	}
	if res.Usable < 1 || res.Usable > int64(plannedPermitsMost) {
		return admissionJSON{}, fmt.Errorf("--offered-load: the quota has %d usable permits; the simulation needs 1 to %d", res.Usable, plannedPermitsMost)
	}
	reserve, err := a.reservePermits(res.Usable)
	if err != nil {
		return admissionJSON{}, err
	}
	s := lossmodel.Scenario{
		Permits:      int(res.Usable),
		Pods:         in.Divisor,
		Floor:        1,
		Load:         load,
		Latency:      lossmodel.Latency{Mean: in.Latency, CV: a.latencyCV},
		Balancer:     lossmodel.Balancer(a.balancer),
		MaxQueueWait: res.PerPod.MaxQueueWait,
		// The operator's waiting room for n permits, floor(n × Qw / W):
		// the model gives it a pod's own permits and the reserve's, as
		// the operator does (sizing.Result.ShareWithReserve).
		QueueCapacity: func(n int) int { return res.ShareFor(n).QueueCapacity },
		Seed:          a.seed,
		GiveLoansBack: a.returnEarly,
		AskAfter:      a.askAfter,
		OfferIdle:     a.offer,
		OfferKeep:     a.offerKeep,
	}
	if s.Balancer == lossmodel.Pinned {
		s.Skew = a.skew
	}
	out := admissionJSON{
		OfferedLoad:    load,
		CallsPerSecond: load * float64(res.Usable) / in.Latency.Seconds(),
		Balancer:       a.balancer,
		LatencyCV:      a.latencyCV,
		Seed:           a.seed,
		Calls:          lossmodel.DefaultCalls,
		ReturnEarly:    a.returnEarly,
		AskAfter:       a.askAfter.String(),
		Offer:          a.offer,
		OfferKeep:      a.offerKeep,
	}
	if s.Balancer == lossmodel.Pinned {
		out.Skew = &a.skew
	}
	reserves := []int{0}
	if reserve > 0 {
		reserves = append(reserves, reserve)
	}
	for _, r := range reserves {
		for _, sharing := range []lossmodel.Sharing{lossmodel.EqualShares, lossmodel.DemandShares} {
			s.Reserve, s.Sharing = r, sharing
			c, err := lossmodel.Compare(s)
			if err != nil {
				return admissionJSON{}, err
			}
			out.GlobalGate = c.Global.AdmittedFraction()
			out.Rows = append(out.Rows, admissionRowJSON{
				Shares: string(sharing), Reserve: r,
				Admitted: c.Scenario.AdmittedFraction(), RatioToGlobalGate: c.Ratio(),
				BorrowedFraction: c.Scenario.BorrowedFraction(), PerPod: c.Scenario.Shares,
				OfferedFraction: offeredFraction(c.Scenario),
			})
		}
	}
	s.Reserve, s.Sharing = 0, lossmodel.DemandShares
	z, err := lossmodel.SmallestReserve(s, target)
	if err != nil {
		return admissionJSON{}, err
	}
	out.SmallestReserve = reserveSizingJSON{
		Target: target, Found: z.Found, Reserve: z.Reserve,
		RatioToGlobalGate: z.Comparison.Ratio(), BorrowedFraction: z.Comparison.Scenario.BorrowedFraction(),
	}
	return out, nil
}

// offeredFraction is the part of r's admitted calls that ran on another
// pod's offered permit.
func offeredFraction(r lossmodel.Result) float64 {
	if r.Admitted == 0 {
		return 0
	}
	return float64(r.Offered) / float64(r.Admitted)
}

// plannedPermitsMost bounds the permits plan simulates: beyond it a run
// takes seconds, and pools that large lose little to fluctuation anyway.
const plannedPermitsMost = 100_000

// writeAdmission prints the admission figures after the plan.
func writeAdmission(out io.Writer, usable int64, a admissionJSON) error {
	balancer := a.Balancer + " balancer"
	if a.Skew != nil {
		balancer = fmt.Sprintf("pinned connections (skew σ %s)", num(*a.Skew))
	}
	rules := ""
	if a.ReturnEarly {
		rules += ", loans returned early"
	}
	if a.AskAfter != "0s" {
		rules += ", asking the permit server after " + a.AskAfter
	}
	if a.Offer {
		rules += fmt.Sprintf(", idle permits offered (each pod keeping %d)", a.OfferKeep)
	}
	fmt.Fprintf(out, "\nAdmission at %s of usable / latency (%s), %s, lognormal latency cv %s%s; a simulation of %d calls, seed %d:\n",
		percent(a.OfferedLoad), perSec(a.CallsPerSecond), balancer, num(a.LatencyCV), rules, a.Calls, a.Seed)
	t := newTable(out, "SHARES", "RESERVE", "ADMITTED", "OF ONE GATE", "BORROWED", "PERMITS PER POD")
	t.row(fmt.Sprintf("one gate of %d", usable), "-", percent(a.GlobalGate), "100%", "-", fmt.Sprint(usable))
	for _, r := range a.Rows {
		borrowed := "-"
		if r.Reserve > 0 || r.BorrowedFraction > 0 {
			borrowed = percent(r.BorrowedFraction)
		}
		shares := "equal"
		if r.Shares == string(lossmodel.DemandShares) {
			shares = "demand-following"
		}
		t.row(shares, fmt.Sprint(r.Reserve), percent(r.Admitted), percent(r.RatioToGlobalGate), borrowed, spread(r.PerPod))
	}
	if err := t.flush(); err != nil {
		return err
	}
	z := a.SmallestReserve
	if !z.Found {
		_, err := fmt.Fprintf(out, "No reserve reaches %s of one gate with demand-following shares: the largest, %s of %d (every pod keeps a permit of its own), reaches %s.\n",
			percent(z.Target), division.Permits(int64(z.Reserve)), usable, percent(z.RatioToGlobalGate))
		return err
	}
	_, err := fmt.Fprintf(out, "Smallest reserve for %s of one gate with demand-following shares: %s of %d (%s of one gate, %s of the admitted calls borrowed).\n",
		percent(z.Target), division.Permits(int64(z.Reserve)), usable, percent(z.RatioToGlobalGate), percent(z.BorrowedFraction))
	return err
}

// spread states the permits per pod: one figure when all hold the same,
// else the fewest and the most.
func spread(perPod []int) string {
	if len(perPod) == 0 {
		return "-"
	}
	lo, hi := slices.Min(perPod), slices.Max(perPod)
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d to %d", lo, hi)
}

// printAdmission prints the plan followed by its admission figures.
func (o *planOptions) printAdmission(out io.Writer, format string, q v1alpha1.DownstreamQuota, plan quota.Sizing) error {
	a, err := o.admission.predict(plan.Input, plan.Result)
	if err != nil {
		return err
	}
	if structured(format) {
		return writeOutput(out, format, planAdmissionJSON{planJSON: planJSONOf(plan), Admission: a})
	}
	if err := writePlanTable(out, q.Name, q.Spec.Downstream, plan); err != nil {
		return err
	}
	return writeAdmission(out, plan.Result.Usable, a)
}
