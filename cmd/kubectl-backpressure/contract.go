package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/division"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// contractFlags are the plan flags --contract accepts; the others describe
// a quota's own contract or a sweep.
var contractFlags = []string{"contract", "filename", "replicas", "caller-replicas", "output"}

// sharedCaller is one quota sharing the contract, with its part and plan.
type sharedCaller struct {
	key   string
	quota v1alpha1.DownstreamQuota
	ready int64
	part  quota.CallerPart
	plan  quota.Sizing
}

// runContract splits the DownstreamContract of --contract over the quotas
// of -f that name it, and each caller's part over its pods.
func (o *planOptions) runContract(cmd *cobra.Command, format string) error {
	flags := cmd.Flags()
	var stray []string
	flags.Visit(func(f *pflag.Flag) {
		if !slices.Contains(contractFlags, f.Name) {
			stray = append(stray, f.Name)
		}
	})
	if len(stray) > 0 {
		return fmt.Errorf("--%s: not with --contract: the contract comes from its file and each caller's settings from its quota", stray[0])
	}
	if o.file == "" {
		return errors.New("--filename: required with --contract: the quotas that share the contract")
	}
	if o.file == stdinPath && o.contract == stdinPath {
		return errors.New("--contract: - reads the standard input, which -f - already reads; give one of them a file")
	}
	dc, err := loadContract(o.contract, cmd.InOrStdin())
	if err != nil {
		return err
	}
	if err := quota.ValidateContract(dc.Spec); err != nil {
		return fmt.Errorf("%s: %w", o.contract, err)
	}
	quotas, err := loadQuotas(o.file, cmd.InOrStdin())
	if err != nil {
		return err
	}
	callers, err := o.callers(flags.Changed("replicas"), dc, quotas)
	if err != nil {
		return err
	}
	in := make([]quota.Caller, len(callers))
	for i, c := range callers {
		in[i] = quota.Caller{Key: c.key, Spec: c.quota.Spec, Serving: c.ready}
	}
	for i, part := range quota.Split(dc.Spec, in) {
		c := &callers[i]
		c.part = part
		// A caller without Ready pods is planned over one, as the operator
		// does: its part is then 0.
		p, err := quota.SizePart(c.quota.Spec, dc.Spec, part.Part, int32(max(c.ready, 1)))
		if err != nil {
			return fmt.Errorf("%s: %s: %w", o.file, c.key, err)
		}
		c.plan = p
	}
	out := cmd.OutOrStdout()
	if format == outputJSON {
		return writeJSON(out, contractJSONOf(dc, callers))
	}
	return writeContractTables(out, dc, callers)
}

// callers returns the quotas of the file that share dc, by key, with their
// Ready pods.
func (o *planOptions) callers(allReplicas bool, dc *v1alpha1.DownstreamContract, quotas []v1alpha1.DownstreamQuota) ([]sharedCaller, error) {
	var out []sharedCaller
	for _, q := range quotas {
		ref := q.Spec.ContractRef
		if ref == nil || ref.Name != dc.Name {
			name := "none"
			if ref != nil {
				name = fmt.Sprintf("%q", ref.Name)
			}
			return nil, fmt.Errorf("%s: %s: spec.contractRef: must name the DownstreamContract %q of --contract, got %s", o.file, callerKey(q), dc.Name, name)
		}
		out = append(out, sharedCaller{key: callerKey(q), quota: q})
	}
	slices.SortFunc(out, func(a, b sharedCaller) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(out); i++ {
		if out[i].key == out[i-1].key {
			return nil, fmt.Errorf("%s: metadata.name: the quota %s appears twice", o.file, out[i].key)
		}
	}
	for key, n := range o.callerReplicas {
		i := slices.IndexFunc(out, func(c sharedCaller) bool { return c.key == key })
		switch {
		case i < 0:
			return nil, fmt.Errorf("--caller-replicas: %s is not a quota of %s sharing %q", key, o.file, dc.Name)
		case n < 0:
			return nil, fmt.Errorf("--caller-replicas: %s must be at least 0, got %d", key, n)
		}
		out[i].ready = int64(n)
	}
	if allReplicas && o.replicas < 0 {
		return nil, fmt.Errorf("--replicas: must be at least 0, got %d", o.replicas)
	}
	for i := range out {
		if _, given := o.callerReplicas[out[i].key]; given {
			continue
		}
		if !allReplicas {
			return nil, fmt.Errorf("--replicas: required with --contract, or --caller-replicas %s=COUNT for each caller", out[i].key)
		}
		out[i].ready = int64(o.replicas)
	}
	return out, nil
}

// callerKey is a quota's NAMESPACE/NAME, or NAME without a namespace.
func callerKey(q v1alpha1.DownstreamQuota) string {
	if q.Namespace == "" {
		return q.Name
	}
	return q.Namespace + "/" + q.Name
}

type callerJSON struct {
	Caller               string   `json:"caller"`
	Weight               int32    `json:"weight"`
	Demand               *int64   `json:"demand"`
	ReadyPods            int64    `json:"readyPods"`
	Permits              int      `json:"permits"`
	RatePerSecond        float64  `json:"ratePerSecond"`
	Burst                int      `json:"burst"`
	RetryBudgetPerSecond float64  `json:"retryBudgetPerSecond"`
	Reason               string   `json:"reason"`
	Plan                 planJSON `json:"plan"`
}

type contractJSON struct {
	Contract string       `json:"contract"`
	Usable   int64        `json:"usable"`
	Callers  []callerJSON `json:"callers"`
}

func contractJSONOf(dc *v1alpha1.DownstreamContract, callers []sharedCaller) contractJSON {
	out := contractJSON{Contract: dc.Name, Usable: quota.ContractUsable(dc.Spec), Callers: []callerJSON{}}
	for _, c := range callers {
		cj := callerJSON{
			Caller: c.key, Weight: c.part.Weight, ReadyPods: c.ready,
			Permits: c.part.Part.Permits, RatePerSecond: c.part.Part.RatePerSecond, Burst: c.part.Part.Burst,
			RetryBudgetPerSecond: c.part.Part.RetryBudgetPerSecond, Reason: c.part.Reason, Plan: planJSONOf(c.plan),
		}
		if c.part.Demand != division.Unbounded {
			d := c.part.Demand
			cj.Demand = &d
		}
		cj.Plan.Replicas = int(c.ready)
		out.Callers = append(out.Callers, cj)
	}
	return out
}

// writeContractTables prints the split over the callers, then each
// caller's division over its pods.
func writeContractTables(out io.Writer, dc *v1alpha1.DownstreamContract, callers []sharedCaller) error {
	usable := quota.ContractUsable(dc.Spec)
	k := dc.Spec.Contract
	subject := dc.Name
	if dc.Spec.Downstream != "" {
		subject += " → " + dc.Spec.Downstream
	}
	product := fmt.Sprintf("%d in flight × %d%% safety", k.Concurrency, safetyOf(dc.Spec))
	if cc := quota.ClusterConcurrency(k); cc < k.Concurrency {
		product = fmt.Sprintf("%d of %d in flight for this cluster × %d%% safety", cc, k.Concurrency, safetyOf(dc.Spec))
	}
	fmt.Fprintf(out, "%s: %s = %s to split over %d callers by weighted max-min fairness, capped at each one's demand\n\n",
		subject, product, division.Permits(usable), len(callers))
	t := newTable(out, "CALLER", "WEIGHT", "DEMAND", "READY PODS", "PERMITS", "RATE", "BURST", "RETRY BUDGET", "REASON")
	for _, c := range callers {
		demand := "none given"
		if c.part.Demand != division.Unbounded {
			demand = fmt.Sprint(c.part.Demand)
		}
		rate, burst := "none", "none"
		if k.RatePerSecond > 0 {
			rate, burst = perSec(c.part.Part.RatePerSecond), fmt.Sprint(c.part.Part.Burst)
		}
		t.row(c.key, fmt.Sprint(c.part.Weight), demand, fmt.Sprint(c.ready), fmt.Sprint(c.part.Part.Permits), rate, burst,
			perSec(c.part.Part.RetryBudgetPerSecond), c.part.Reason)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nDEMAND is the calls in flight a caller can use: demand.inFlight, or demand.ratePerSecond × typical latency.")
	for _, c := range callers {
		fmt.Fprintf(out, "\n%s\n\n", strings.Repeat("─", 8)+" "+c.key+" "+strings.Repeat("─", 8))
		if err := writePlanTable(out, c.key, "", c.plan); err != nil {
			return err
		}
	}
	return nil
}

func safetyOf(c v1alpha1.DownstreamContractSpec) int32 {
	if c.SafetyPercent == 0 {
		return quota.DefaultSafetyPercent
	}
	return c.SafetyPercent
}
