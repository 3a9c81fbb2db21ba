package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

type evaluateJSON struct {
	Throughput           float64 `json:"throughput"`
	MaxQueueWaitSeconds  float64 `json:"maxQueueWaitSeconds"`
	TotalSeconds         float64 `json:"totalSeconds"`
	FitsDeadline         bool    `json:"fitsDeadline"`
	LargestQueueThatFits int     `json:"largestQueueThatFits"`
}

func newEvaluateCommand(format func() string) *cobra.Command {
	var p sizing.Pool
	cmd := &cobra.Command{
		Use:   "evaluate",
		Short: "Check an existing worker pool and queue against a latency and a deadline",
		Long: `evaluate computes what a pool of workers behind a bounded queue delivers at a
latency: its throughput, the wait of a task that finds the queue full, whether
that wait plus the latency fits the deadline, and the largest queue that does.
A pool that was fine at 50ms can break its deadline at 150ms.`,
		Example: `  kubectl backpressure evaluate --workers 10 --queue 20 --latency 150ms --deadline 300ms`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := sizing.Evaluate(p)
			if err != nil {
				return flagError(err, map[string]string{"Workers": "workers", "Queue": "queue", "Latency": "latency", "Deadline": "deadline"})
			}
			out := cmd.OutOrStdout()
			if structured(format()) {
				return writeOutput(out, format(), evaluateJSON{
					Throughput:           res.ThroughputPerSecond,
					MaxQueueWaitSeconds:  seconds(res.MaxQueueWait),
					TotalSeconds:         seconds(res.Total),
					FitsDeadline:         res.FitsDeadline,
					LargestQueueThatFits: res.LargestQueueThatFits,
				})
			}
			t := newTable(out, "POOL", "VALUE", "FORMULA")
			t.row("throughput", perSec(res.ThroughputPerSecond), fmt.Sprintf("workers / latency = %d / %s", p.Workers, p.Latency))
			t.row("max queue wait", readable(res.MaxQueueWait), fmt.Sprintf("queue / throughput = %d / %s", p.Queue, perSec(res.ThroughputPerSecond)))
			t.row("total", readable(res.Total), fmt.Sprintf("max queue wait + latency = %s + %s", readable(res.MaxQueueWait), p.Latency))
			// Exact durations here: rounded, a total just above the deadline
			// would read as equal to it.
			fits := fmt.Sprintf("total ≤ deadline: %s ≤ %s", res.Total, p.Deadline)
			if !res.FitsDeadline {
				fits = fmt.Sprintf("total > deadline: %s > %s", res.Total, p.Deadline)
			}
			t.row("fits deadline", yesNo(res.FitsDeadline), fits)
			largest := fmt.Sprintf("floor((deadline − latency) × workers / latency) = floor((%s − %s) × %d / %s)", p.Deadline, p.Latency, p.Workers, p.Latency)
			if p.Latency > p.Deadline {
				largest = fmt.Sprintf("none fits: latency %s > deadline %s", p.Latency, p.Deadline)
			}
			t.row("largest queue that fits", fmt.Sprint(res.LargestQueueThatFits), largest)
			return t.flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Workers, "workers", 0, "number of workers")
	f.IntVar(&p.Queue, "queue", 0, "queue capacity")
	f.DurationVar(&p.Latency, "latency", 0, "time one task takes")
	f.DurationVar(&p.Deadline, "deadline", 0, "time a task may take, queue wait included")
	for _, name := range []string{"workers", "queue", "latency", "deadline"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// durationPtr returns &d when the flag was set, else nil.
func durationPtr(cmd *cobra.Command, name string, d time.Duration) *time.Duration {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	return &d
}
