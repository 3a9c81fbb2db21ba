package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

type backlogJSON struct {
	GrowthPerSecond  float64  `json:"growthPerSecond"`
	ConsumerRate     float64  `json:"consumerRate"`
	SecondsToFill    *float64 `json:"secondsToFill"`
	QueueForBuffer   *int     `json:"queueForBuffer"`
	WorkersForTarget int      `json:"workersForTarget"`
}

func newBacklogCommand(format func() string) *cobra.Command {
	var (
		b      sizing.BacklogInput
		queue  int
		buffer time.Duration
		target float64
	)
	cmd := &cobra.Command{
		Use:   "backlog",
		Short: "Compute how fast a backlog grows between producers and consumers",
		Long: `backlog computes the growth of a queue fed at an arrival rate and drained by
workers at a latency: Q(t) = Q0 + (arrival − workers / latency) × t. With
--queue it says how soon that queue fills, with --buffer how large a queue
absorbs a burst of that length, and it gives the workers a target rate needs
(--target-rate, else the arrival rate).`,
		Example: `  kubectl backpressure backlog --arrival 1900 --workers 50 --latency 220ms --queue 1000 --buffer 2s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("queue") {
				b.Queue = &queue
			}
			b.Buffer = durationPtr(cmd, "buffer", buffer)
			if !cmd.Flags().Changed("target-rate") {
				target = b.ArrivalPerSecond
			}
			b.TargetPerSecond = &target
			res, err := sizing.Backlog(b)
			if err != nil {
				return flagError(err, map[string]string{
					"ArrivalPerSecond": "arrival", "Workers": "workers", "Latency": "latency",
					"Queue": "queue", "Buffer": "buffer", "TargetPerSecond": "target-rate",
				})
			}
			out := cmd.OutOrStdout()
			if structured(format()) {
				js := backlogJSON{
					GrowthPerSecond:  res.GrowthPerSecond,
					ConsumerRate:     res.ConsumerPerSecond,
					QueueForBuffer:   res.QueueForBuffer,
					WorkersForTarget: *res.WorkersForTarget,
				}
				if res.TimeToFill != nil {
					s := seconds(*res.TimeToFill)
					js.SecondsToFill = &s
				}
				return writeOutput(out, format(), js)
			}

			t := newTable(out, "BACKLOG", "VALUE", "FORMULA")
			t.row("consumer rate", perSec(res.ConsumerPerSecond), fmt.Sprintf("workers / latency = %d / %s", b.Workers, b.Latency))
			growth := perSec(res.GrowthPerSecond)
			if res.GrowthPerSecond <= 0 {
				growth += " (drains)"
			}
			t.row("growth", growth, fmt.Sprintf("arrival − consumer rate = %s − %s", perSec(b.ArrivalPerSecond), perSec(res.ConsumerPerSecond)))
			switch {
			case b.Queue == nil:
			case res.TimeToFill != nil:
				t.row("time to fill", readable(*res.TimeToFill), fmt.Sprintf("queue / growth = %d / %s", *b.Queue, perSec(res.GrowthPerSecond)))
			default:
				t.row("time to fill", "never", fmt.Sprintf("the consumers keep up: growth %s ≤ 0", perSec(res.GrowthPerSecond)))
			}
			if b.Buffer != nil {
				t.row("queue for buffer", fmt.Sprint(*res.QueueForBuffer), fmt.Sprintf("ceil(max(0, growth) × buffer) = ceil(max(0, %s) × %s)", perSec(res.GrowthPerSecond), *b.Buffer))
			}
			what := "target"
			if !cmd.Flags().Changed("target-rate") {
				what = "arrival"
			}
			t.row("workers for "+perSec(target), fmt.Sprint(*res.WorkersForTarget), fmt.Sprintf("ceil(%s × latency) = ceil(%s × %s)", what, perSec(target), b.Latency))
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.Float64Var(&b.ArrivalPerSecond, "arrival", 0, "producers' rate, items per second")
	f.IntVar(&b.Workers, "workers", 0, "number of consumers")
	f.DurationVar(&b.Latency, "latency", 0, "time one consumer takes per item")
	f.IntVar(&queue, "queue", 0, "queue capacity, to compute the time to fill it")
	f.DurationVar(&buffer, "buffer", 0, "length of a burst at the arrival rate to absorb")
	f.Float64Var(&target, "target-rate", 0, "rate to size the workers for (default: the arrival rate)")
	for _, name := range []string{"arrival", "workers", "latency"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
