package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

type roundJSON struct {
	Rejection     float64 `json:"rejection"`
	Amplification float64 `json:"amplification"`
	AttemptRate   float64 `json:"attemptRate"`
}

type retryJSON struct {
	SingleRound           roundJSON   `json:"singleRound"`
	FixedPoint            roundJSON   `json:"fixedPoint"`
	Rounds                []roundJSON `json:"rounds"`
	Converged             bool        `json:"converged"`
	DivergentWithoutLimit bool        `json:"divergentWithoutLimit"`
}

func roundJSONOf(r sizing.Round) roundJSON {
	return roundJSON{Rejection: r.Rejection, Amplification: r.Amplification, AttemptRate: r.AttemptRatePerSecond}
}

func newRetryCommand(format func() string) *cobra.Command {
	var l sizing.RetryLoad
	cmd := &cobra.Command{
		Use:   "retry",
		Short: "Compute how retries amplify load on an overloaded capacity",
		Long: `retry computes the retry amplification of an arrival rate offered to a
capacity: with p = max(0, 1 − capacity / attempts), each call makes
A = (1 − p^(r+1)) / (1 − p) attempts, and attempts = arrival × A. It shows the
single-round estimate (p from the arrival rate alone) and iterates round by
round to the fixed point. Retries create no capacity: without a retry limit an
arrival above capacity grows without bound.`,
		Example: `  kubectl backpressure retry --capacity 181 --arrival 1900 --retries 1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := sizing.Amplification(l)
			if err != nil {
				return flagError(err, map[string]string{"CapacityPerSecond": "capacity", "ArrivalPerSecond": "arrival", "MaxRetries": "retries"})
			}
			out := cmd.OutOrStdout()
			if structured(format()) {
				js := retryJSON{
					SingleRound:           roundJSONOf(res.SingleRound),
					FixedPoint:            roundJSONOf(res.FixedPoint),
					Converged:             res.Converged,
					DivergentWithoutLimit: res.DivergentWithoutLimit,
				}
				for _, r := range res.Rounds {
					js.Rounds = append(js.Rounds, roundJSONOf(r))
				}
				return writeOutput(out, format(), js)
			}
			return writeRetryTable(out, l, res)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&l.CapacityPerSecond, "capacity", 0, "calls per second the capacity accepts")
	f.Float64Var(&l.ArrivalPerSecond, "arrival", 0, "first attempts per second")
	f.IntVar(&l.MaxRetries, "retries", 0, "most retries of one call")
	for _, name := range []string{"capacity", "arrival", "retries"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func writeRetryTable(out io.Writer, l sizing.RetryLoad, res sizing.AmplificationResult) error {
	r := l.MaxRetries
	fmt.Fprintf(out, "Arrival %s against capacity %s, max retries per call %d\n\n", perSec(l.ArrivalPerSecond), perSec(l.CapacityPerSecond), r)
	t := newTable(out, "ROUND", "REJECTION", "AMPLIFICATION", "ATTEMPTS", "FORMULA")
	prev := l.ArrivalPerSecond
	for i, round := range res.Rounds {
		t.row(fmt.Sprint(i+1), percent(round.Rejection), fmt.Sprintf("%.4f", round.Amplification), perSec(round.AttemptRatePerSecond),
			fmt.Sprintf("p = max(0, 1 − %s / %s), A = (1 − p^%d) / (1 − p), attempts = %s × A",
				num(l.CapacityPerSecond), num(prev), r+1, num(l.ArrivalPerSecond)))
		prev = round.AttemptRatePerSecond
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "Single round: %s of calls rejected, %.4f attempts per call, %s attempted.\n",
		percent(res.SingleRound.Rejection), res.SingleRound.Amplification, perSec(res.SingleRound.AttemptRatePerSecond))
	settled := fmt.Sprintf("settled after %d rounds", len(res.Rounds))
	if !res.Converged {
		settled = fmt.Sprintf("still moving after %d rounds", len(res.Rounds))
	}
	fmt.Fprintf(out, "Fixed point (%s): %s rejected, %.4f attempts per call, %s attempted against a capacity of %s.\n",
		settled, percent(res.FixedPoint.Rejection), res.FixedPoint.Amplification, perSec(res.FixedPoint.AttemptRatePerSecond), perSec(l.CapacityPerSecond))
	if res.DivergentWithoutLimit {
		_, err := fmt.Fprintf(out, "Without a retry limit this diverges: arrival %s exceeds capacity %s, and retries create no capacity.\n",
			perSec(l.ArrivalPerSecond), perSec(l.CapacityPerSecond))
		return err
	}
	_, err := fmt.Fprintf(out, "Without a retry limit this still settles: arrival %s is within capacity %s.\n",
		perSec(l.ArrivalPerSecond), perSec(l.CapacityPerSecond))
	return err
}
