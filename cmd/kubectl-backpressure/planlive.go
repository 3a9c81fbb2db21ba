package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// liveExcluded are the plan flags that name another source of quotas than
// the cluster.
var liveExcluded = []string{"filename", "contract", "caller-replicas"}

// runLive plans the DownstreamQuota that arg (dq/NAME) names in the
// cluster, over its HPA's range unless --replicas or --replicas-range
// says otherwise.
func (o *planOptions) runLive(cmd *cobra.Command, format, arg string) error {
	flags := cmd.Flags()
	name, err := quotaName(arg)
	if err != nil {
		return err
	}
	for _, name := range liveExcluded {
		if flags.Changed(name) {
			return fmt.Errorf("--%s: not with %s, which reads the quota from the cluster", name, arg)
		}
	}
	o.live = arg
	if err := o.checkDivisorFlags(flags); err != nil {
		return err
	}
	c, err := connect(o.config)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	q, err := c.quota(ctx, c.namespace, name)
	if err != nil {
		return err
	}
	if ref := q.Spec.ContractRef; ref != nil && q.Spec.Contract == nil {
		return fmt.Errorf("%s: spec.contractRef: the quota's part of the shared DownstreamContract %q depends on the other callers; plan --contract FILE -f QUOTAS splits it, and status %s shows the part it holds now", arg, ref.Name, name)
	}
	if err := o.applyFlags(flags, &q.Spec); err != nil {
		return err
	}

	out := cmd.OutOrStdout()
	lo, hi := int32(0), int32(0)
	switch {
	case flags.Changed("replicas"):
	case flags.Changed("replicas-range"):
		if lo, hi, err = parseRange(o.replicasRange); err != nil {
			return err
		}
	default:
		hpa, err := c.hpaOf(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
		if hpa == nil {
			return fmt.Errorf("%s: no HorizontalPodAutoscaler scales %s/%s in namespace %s; give --replicas N or --replicas-range MIN..MAX",
				arg, q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name, q.Namespace)
		}
		lo, hi = hpaRange(hpa)
		if format != outputJSON {
			fmt.Fprintf(out, "%s/%s: HorizontalPodAutoscaler %s scales %s/%s over %d..%d replicas (desired now %d)\n",
				q.Namespace, q.Name, hpa.Name, q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name, lo, hi, hpa.Status.DesiredReplicas)
		}
	}
	return o.print(cmd, format, *q, lo, hi)
}

// hpaRange is the HPA's minReplicas (1 when unset, as the API defaults it)
// and maxReplicas.
func hpaRange(hpa *autoscalingv2.HorizontalPodAutoscaler) (int32, int32) {
	lo := int32(1)
	if hpa.Spec.MinReplicas != nil && *hpa.Spec.MinReplicas > 0 {
		lo = *hpa.Spec.MinReplicas
	}
	return lo, max(hpa.Spec.MaxReplicas, lo)
}

// bootstrapJSON is the share for a fail-static start: what a pod may hold
// before the operator's plan reaches it.
type bootstrapJSON struct {
	// Permits is floor(usable / maxReplicas).
	Permits     int64 `json:"permits"`
	Usable      int64 `json:"usable"`
	MaxReplicas int32 `json:"maxReplicas"`
}

// sweepBootstrapJSON is plan's JSON for a range: the sweep and the
// bootstrap share.
type sweepBootstrapJSON struct {
	sweepJSON
	Bootstrap bootstrapJSON `json:"bootstrap"`
}

// bootstrapOf is the bootstrap share of a sweep up to maxReplicas: the
// usable permits divided by the most pods that may run at once, so that
// any number of pods up to that maximum, each starting on it, stays within
// the contract.
func bootstrapOf(s sizing.SweepResult, maxReplicas int32) bootstrapJSON {
	b := bootstrapJSON{MaxReplicas: maxReplicas}
	if len(s.Rows) > 0 && maxReplicas > 0 {
		b.Usable = s.Rows[0].Result.Usable
		b.Permits = b.Usable / int64(maxReplicas)
	}
	return b
}

// writeBootstrap prints the bootstrap share in one line, with what it is
// for.
func writeBootstrap(out io.Writer, b bootstrapJSON) error {
	use := "give it to runtime's bootstrap plan, the fail-static start before the operator's plan arrives"
	if b.Permits == 0 {
		use = "below one permit, a pod on runtime's bootstrap plan admits no call until the operator's plan arrives"
	}
	_, err := fmt.Fprintf(out, "\nBootstrap share: %s per pod = floor(%d usable / %d, the most replicas): %s (docs/library.md, \"Starting without the operator\").\n",
		division.Permits(b.Permits), b.Usable, b.MaxReplicas, use)
	return err
}
