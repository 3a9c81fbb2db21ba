package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
)

type statusOptions struct {
	config        *genericclioptions.ConfigFlags
	print         *genericclioptions.PrintFlags
	allNamespaces bool
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{print: genericclioptions.NewPrintFlags("")}
	cmd := &cobra.Command{
		Use:   "status [QUOTA]",
		Short: "Show each pod's share of a live DownstreamQuota and whether it applied it",
		Long: `status reads DownstreamQuotas from the cluster and shows, per quota: the
contract and the usable permits, the divisor and the facts it was chosen from,
the division (revision, base, extra, handed out, held), the handover in
progress, each pod's share and whether the pod applied it (its
applied.backpressure.dev/<quota> annotation carries the current epoch and
revision), and the diagnostics.

Without QUOTA it shows every quota of the namespace (-n, or the context's);
-A shows every namespace's.

-o json, yaml, jsonpath=... and go-template=... print a QuotaStatus view
(apiVersion kubectl.backpressure.dev/v1alpha1, the plugin's own, not served
by the API server): the quota's status joined with its pods'
acknowledgements, several of them in a v1 List. -o name prints the quotas,
downstreamquota.backpressure.dev/NAME, as kubectl get does.`,
		Example: `  kubectl backpressure status -n shop
  kubectl backpressure status logistics-api -n shop
  kubectl backpressure status -A
  kubectl backpressure status logistics-api -n shop -o jsonpath='{.allApplied}'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
	o.config = newConfigFlags(cmd)
	o.print.AddFlags(cmd)
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "show the quotas of every namespace")
	cmd.ValidArgsFunction = completeQuotaNames(o.config, "")
	registerLiveCompletions(cmd, o.config)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(o.print.AllowedFormats(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *statusOptions) run(ctx context.Context, out, errOut io.Writer, args []string) error {
	if o.allNamespaces && len(args) > 0 {
		return errors.New("--all-namespaces: a quota cannot be named across all namespaces; give -n NAMESPACE")
	}
	var printer printers.ResourcePrinter
	if format := *o.print.OutputFormat; format != "" {
		p, err := o.print.ToPrinter()
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		printer = p
	}
	c, err := connect(o.config)
	if err != nil {
		return err
	}
	ns := c.namespace
	var quotas []v1alpha1.DownstreamQuota
	if len(args) == 1 {
		q, err := c.quota(ctx, ns, args[0])
		if err != nil {
			return err
		}
		quotas = []v1alpha1.DownstreamQuota{*q}
	} else {
		if o.allNamespaces {
			ns = ""
		}
		if quotas, err = c.quotas(ctx, ns); err != nil {
			return err
		}
	}

	if *o.print.OutputFormat == "name" {
		for i := range quotas {
			q := &quotas[i]
			q.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("DownstreamQuota"))
			if err := printer.PrintObj(q, out); err != nil {
				return err
			}
		}
		return nil
	}

	if len(quotas) > 1 {
		var namespaces []string
		for _, q := range quotas {
			namespaces = append(namespaces, q.Namespace)
		}
		c.prefetch(ctx, slices.Compact(namespaces)) // quotas are sorted by namespace
	}
	views := make([]*quotaStatus, 0, len(quotas))
	for i := range quotas {
		v, err := c.statusOf(ctx, &quotas[i])
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	if printer != nil {
		var obj runtime.Object = &statusList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}, Items: views}
		if len(args) == 1 {
			obj = views[0]
		}
		return printer.PrintObj(obj, out)
	}
	if len(views) == 0 {
		where := "in namespace " + ns
		if ns == "" {
			where = "in any namespace"
		}
		_, err := fmt.Fprintf(errOut, "No DownstreamQuotas found %s.\n", where)
		return err
	}
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := writeStatus(out, v); err != nil {
			return err
		}
	}
	return nil
}

// statusOf reads what the view of q needs besides q: its pods and its
// shared contract. What cannot be read is a problem in the view, not an
// error: the on-call view shows what it can.
func (c *cluster) statusOf(ctx context.Context, q *v1alpha1.DownstreamQuota) (*quotaStatus, error) {
	f := quotaFacts{quota: q}
	pods, err := c.podsOf(ctx, q)
	switch {
	case errors.Is(err, errWorkloadNotFound):
		f.problems = append(f.problems, fmt.Sprintf("%s/%s: not found in namespace %s", q.Spec.WorkloadRef.Kind, q.Spec.WorkloadRef.Name, q.Namespace))
	case apierrors.IsForbidden(err):
		f.problems = append(f.problems, "pods: "+err.Error())
	case err != nil:
		return nil, fmt.Errorf("%s/%s: %w", q.Namespace, q.Name, err)
	}
	f.pods = pods
	if q.Spec.Reserve != nil {
		brokers, err := c.brokerPodsOf(ctx, q)
		switch {
		case errors.Is(err, errBrokerNotFound):
			f.problems = append(f.problems, fmt.Sprintf("spec.reserve.brokerRef: Deployment/%s: not found in namespace %s", q.Spec.Reserve.BrokerRef.Name, q.Namespace))
		case apierrors.IsForbidden(err):
			f.problems = append(f.problems, "broker pods: "+err.Error())
		case err != nil:
			return nil, fmt.Errorf("%s/%s: spec.reserve.brokerRef: %w", q.Namespace, q.Name, err)
		}
		f.brokerPods = brokers
	}
	if ref := q.Spec.ContractRef; ref != nil {
		dc, err := c.contract(ctx, ref.Name)
		switch {
		case err == nil:
			f.contract = dc
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			f.problems = append(f.problems, "spec.contractRef: "+err.Error())
		default:
			return nil, fmt.Errorf("%s/%s: spec.contractRef: %w", q.Namespace, q.Name, err)
		}
	}
	return buildStatus(f), nil
}

// writeStatus prints one quota's view: its facts, one row per pod, and
// the diagnostics.
func writeStatus(out io.Writer, v *quotaStatus) error {
	fmt.Fprintf(out, "%s/%s → %s, for the pods of %s\n", v.Metadata.Namespace, v.Metadata.Name, v.Downstream, v.Workload)
	facts := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fact := func(name, text string) { fmt.Fprintf(facts, "  %s\t%s\n", name, text) }
	fact("contract", contractLine(v.Contract))
	fact("divisor", divisorLine(v.Divisor))
	fact("division", divisionLine(v.Division, v.Divisor))
	if c := v.HandedOver; c != nil {
		fact("handover", fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message))
	}
	fact("applied", appliedLine(v))
	if r := v.Reserve; r != nil {
		fact("reserve", reserveLine(r))
	}
	if c := v.Ready; c != nil && c.Status == metav1.ConditionTrue {
		// A Ready quota's message restates the lines above and the
		// diagnostics below.
		fact("ready", fmt.Sprintf("%s, reason %s", c.Status, c.Reason))
	} else if c != nil {
		fact("ready", fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message))
	} else {
		fact("ready", "no condition yet: the operator has not reconciled the quota")
	}
	if cm := v.ConfigMap; cm != nil {
		fact("configmap", fmt.Sprintf("%s, key %s", cm.Name, cm.Key))
	}
	for _, p := range v.Problems {
		fact("problem", p)
	}
	if err := facts.Flush(); err != nil {
		return err
	}

	if err := writePods(out, "POD", v.Pods, v.Division); err != nil {
		return err
	}
	if r := v.Reserve; r != nil {
		if err := writePods(out, "REPLICA", r.Replicas, v.Division); err != nil {
			return err
		}
	}

	return writeDiagnostics(out, v.Diagnostics, func(d v1alpha1.Diagnostic) (string, string) { return d.Reason, d.Message })
}

// writePods prints a table of pods, headed first, after a blank line;
// nothing when there are none.
func writePods(out io.Writer, first string, pods []podView, div *divisionView) error {
	if len(pods) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	t := newTable(out, first, "READY", "PERMITS", "TARGET", "HOLDS", "APPLIED")
	for _, p := range pods {
		ready := yesNo(p.Ready)
		if p.Terminating {
			ready = "terminating"
		} else if !p.Exists {
			ready = "-"
		}
		t.row(p.Name, ready, fmt.Sprint(p.Permits), optional(p.Target), optional(p.Holds), appliedText(p, div))
	}
	return t.flush()
}

// reserveLine states where the reserve went: "8 of 8 permits handed out to
// 2 replicas of Deployment broker", what was asked for when it was cut,
// and the Reserved condition when it is not True.
func reserveLine(r *reserveView) string {
	replicas := 0
	for _, p := range r.Replicas {
		if p.Permits > 0 {
			replicas++
		}
	}
	word := "replicas"
	if replicas == 1 {
		word = "replica"
	}
	text := fmt.Sprintf("%d of %d permits handed out to %d %s of Deployment %s", r.HandedOut, r.Permits, replicas, word, r.Broker)
	if r.Requested != r.Permits {
		text += fmt.Sprintf(" (%d asked for)", r.Requested)
	}
	if c := r.Reserved; c != nil && c.Status != metav1.ConditionTrue {
		text += fmt.Sprintf("; Reserved %s %s: %s", c.Status, c.Reason, c.Message)
	}
	return text
}

func optional(n *int32) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

// contractLine states the contract and its usable permits: "50 in flight ×
// 80% safety = 40 usable permits".
func contractLine(c contractView) string {
	prefix := ""
	if c.Shared != "" {
		prefix = fmt.Sprintf("DownstreamContract %s, shared: ", c.Shared)
		if c.Concurrency == 0 {
			return fmt.Sprintf("DownstreamContract %s, shared (not readable here)", c.Shared)
		}
	}
	inFlight := fmt.Sprintf("%d in flight", c.Concurrency)
	if c.ClusterConcurrency > 0 {
		inFlight = fmt.Sprintf("%d of %d in flight for this cluster", c.ClusterConcurrency, c.Concurrency)
	}
	text := fmt.Sprintf("%s%s × %d%% safety = %s", prefix, inFlight, c.SafetyPercent, division.Permits(c.Usable))
	if c.RatePerSecond > 0 {
		text += fmt.Sprintf("; rate %d/s, burst %d", c.RatePerSecond, c.Burst)
	}
	if c.Shared != "" {
		text += " over its callers"
	}
	return text
}

// divisorLine states the divisor, its source and the facts behind it.
func divisorLine(r *v1alpha1.ReplicaStatus) string {
	if r == nil {
		return "none yet: the operator has not reconciled the quota"
	}
	facts := []string{fmt.Sprintf("spec %d", r.Spec)}
	if r.HPAMax != nil {
		hpa := "HPA "
		if r.HPAMin != nil {
			hpa += fmt.Sprintf("%d..%d", *r.HPAMin, *r.HPAMax)
		} else {
			hpa += fmt.Sprintf("..%d", *r.HPAMax)
		}
		switch {
		case r.HPADesired == nil:
		case *r.HPADesired == 0 && (r.HPAMin == nil || *r.HPAMin > 0):
			// An HPA that has never computed a count (no metrics yet)
			// reports 0, which is below its own floor: it desires
			// nothing yet, not zero pods.
			hpa += ", no desired count yet"
		default:
			hpa += fmt.Sprintf(" desired %d", *r.HPADesired)
		}
		facts = append(facts, hpa)
	}
	facts = append(facts, fmt.Sprintf("%d pods exist, %d Ready", r.ExistingPods, r.ReadyPods))
	return fmt.Sprintf("%d, from %s (%s)", r.Divisor, r.DivisorSource, strings.Join(facts, ", "))
}

// divisionLine states the division's arithmetic: "revision 3: 42 usable =
// 5 × 8 + 2, to give 6 pods 5 and 2 pods 6; 42 handed out, 42 held". What
// the division gives a pod is its target; what a pod may still hold is the
// HOLDS column's, so the line does not say "hold" for the targets.
func divisionLine(d *divisionView, r *v1alpha1.ReplicaStatus) string {
	if d == nil {
		return "none yet: the operator has not divided the permits"
	}
	split := fmt.Sprintf("base %d, %d pods at base+1", d.Base, d.Extra)
	if r != nil && r.Divisor > 0 {
		n := int64(r.Divisor)
		split = fmt.Sprintf("%d × %d + %d, to give %s %d", d.Base, n, d.Extra, podsWord(n-int64(d.Extra)), d.Base)
		if d.Extra > 0 {
			split += fmt.Sprintf(" and %s %d", podsWord(int64(d.Extra)), d.Base+1)
		}
	}
	return fmt.Sprintf("revision %d: %d usable = %s; %d handed out, %d held", d.Revision, d.Usable, split, d.HandedOut, d.Held)
}

// appliedLine answers "has every pod applied its share?".
func appliedLine(v *quotaStatus) string {
	switch {
	case v.Division == nil:
		return "nothing to apply yet"
	case v.Total == 0:
		return "no pod exists"
	case v.AllApplied:
		return fmt.Sprintf("every pod, %d of %d, applied revision %d", v.Applied, v.Total, v.Division.Revision)
	}
	return fmt.Sprintf("%d of %d pods applied revision %d; not yet: %s", v.Applied, v.Total, v.Division.Revision, pendingNames(v))
}
