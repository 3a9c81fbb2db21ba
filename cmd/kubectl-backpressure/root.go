package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/backpressure-dev/backpressure-operator/internal/version"
)

// newRootCommand builds the command tree writing to stdout and stderr. It
// neither prints errors nor usage on failure: run prints the one-line error.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	var output string
	root := &cobra.Command{
		Use:   "kubectl-backpressure",
		Short: "Size per-pod shares of a downstream's global limit, and check them",
		Long: `kubectl backpressure computes what backpressure-operator computes: the
per-pod share of a DownstreamQuota over a replica count (or over an HPA's range),
and the checks behind it: an existing pool against a deadline, retry
amplification under overload, and backlog growth. Every table shows the formula
behind each number; -o json gives the same figures to scripts.

Against a cluster (the kubeconfig flags of kubectl, -n, -A), status shows each
pod's share of a live quota and whether the pod applied it, and plan dq/NAME
plans a live quota over its HPA's range.`,
		Example: `  kubectl backpressure status -n shop
  kubectl backpressure plan dq/logistics-api -n shop
  kubectl backpressure plan -f quota.yaml --replicas 8
  kubectl backpressure plan --concurrency 50 --latency 220ms --deadline 300ms --replicas-range 2..20
  kubectl backpressure evaluate --workers 10 --queue 20 --latency 150ms --deadline 300ms
  kubectl backpressure retry --capacity 181 --arrival 1900 --retries 1
  kubectl backpressure backlog --arrival 1900 --workers 50 --latency 220ms --queue 1000 --buffer 2s`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl backpressure"},
		Version:       version.Get().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if output != outputTable && output != outputJSON {
				return fmt.Errorf("--output: must be %s or %s, got %q", outputTable, outputJSON, output)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVarP(&output, "output", "o", outputTable, "output format: table or json")

	format := func() string { return output }
	root.AddCommand(
		newPlanCommand(format),
		newEvaluateCommand(format),
		newRetryCommand(format),
		newBacklogCommand(format),
		newStatusCommand(),
	)
	return root
}
