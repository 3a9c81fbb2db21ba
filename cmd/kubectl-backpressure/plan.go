package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// planFlagFields maps each plan flag to the field path it overrides, so
// that an error about a field names the flag when the flag gave its value.
var planFlagFields = map[string]string{
	"concurrency":      "spec.contract.concurrency",
	"rate":             "spec.contract.ratePerSecond",
	"burst":            "spec.contract.burst",
	"safety-percent":   "spec.safetyPercent",
	"latency":          "spec.latency.typical",
	"worst-latency":    "spec.latency.worst",
	"deadline":         "spec.deadline",
	"max-queue-wait":   "spec.maxQueueWait",
	"acquire-timeout":  "spec.acquireTimeout",
	"cluster-share":    "spec.contract.clusterShare",
	"demand":           "spec.demand.ratePerSecond",
	"demand-in-flight": "spec.demand.inFlight",
	"retries":          "spec.retry.maxRetries",
	"retry-budget":     "spec.retry.budgetPerSecond",
	"below-one":        "spec.belowOne",
	"replicas":         quota.DivisorField,
	"replicas-range":   quota.MinReplicasField,
}

// requiredWithoutFile are the flags a plan needs when no file gives them.
var requiredWithoutFile = []string{"concurrency", "latency", "deadline"}

type planOptions struct {
	file           string
	contract       string
	callerReplicas map[string]int
	replicas       int32
	replicasRange  string

	compare bool

	concurrency    int32
	clusterShare   string
	rate           int32
	burst          int32
	safetyPercent  int32
	latency        time.Duration
	worstLatency   time.Duration
	deadline       time.Duration
	maxQueueWait   time.Duration
	acquireTimeout time.Duration
	demand         int32
	demandInFlight int32
	retries        int32
	retryBudget    int32
	belowOne       string

	// config are the kubeconfig flags, for plan dq/NAME.
	config *genericclioptions.ConfigFlags
	// live is the dq/NAME argument, when the quota comes from the cluster.
	live string

	admission admissionOptions
}

func newPlanCommand(format func() string) *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan [dq/NAME]",
		Short: "Compute the per-pod share of a DownstreamQuota over a replica count or range",
		Long: `plan divides a downstream's global contract over the replicas that call it,
exactly as the operator does. The usable permits A = floor(concurrency ×
safety) (of this cluster's share of the contract, when it has one) are all
handed out: with N replicas every pod holds floor(A / N) and A mod N of them
one more. plan shows that division with its arithmetic, each pod's share
(permits, rate, burst, waiting room, timeouts, workers, retry budget) at both
sizes, the demand figures, and every diagnostic.

The contract comes from -f FILE (a DownstreamQuota manifest), from flags, or
both: flags override the file. --replicas gives the divisor; --replicas-range
MIN..MAX plans every divisor an HPA may choose, with the permits in use at
each and what the previous division (floor(A / N) for every pod) used;
--compare prints only that comparison. A range also gives the bootstrap share
for a fail-static start: the usable permits divided by MAX, the share a pod
may take before the operator's plan reaches it.

plan dq/NAME reads the DownstreamQuota NAME from the cluster (-n, or the
context's namespace) and plans it over the range of the HPA that scales its
workload (spec.hpaName, or the HPA whose scaleTargetRef names it):
minReplicas..maxReplicas. --replicas or --replicas-range replace that range,
and the contract flags override the live spec to ask "what if".

--contract FILE reads a DownstreamContract shared by several workloads and
splits it over the quotas of -f FILE that name it in contractRef, as the
operator does: by weighted max-min fairness capped at each caller's demand,
then exactly over each caller's Ready pods (--replicas for every caller,
--caller-replicas NAMESPACE/NAME=COUNT for one).

--offered-load LOAD predicts, by a seeded simulation, the part of the calls
the division admits at that load (a fraction of usable / latency) behind a
--balancer, against one gate of all the usable permits fed the same calls:
with equal and demand-following shares, with a --reserve lent per call,
and the smallest reserve that reaches --reserve-target (docs/plugin.md).`,
		Example: `  kubectl backpressure plan -f quota.yaml --replicas 8
  kubectl backpressure plan -f quota.yaml --replicas-range 2..60 -o json
  kubectl backpressure plan -f quota.yaml --replicas-range 1..60 --compare
  kubectl backpressure plan dq/logistics-api -n shop
  kubectl get dq logistics-api -n shop -o yaml | kubectl backpressure plan -f - --replicas 8
  kubectl backpressure plan --concurrency 50 --latency 220ms --worst-latency 1.8s --deadline 2s \
    --max-queue-wait 100ms --demand 1900 --replicas 8
  kubectl backpressure plan -f quota.yaml --replicas 8 --offered-load 80% --balancer pinned --reserve 8`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.admission.check(cmd.Flags(), o.contract != ""); err != nil {
				return err
			}
			if len(args) == 1 {
				return o.runLive(cmd, format(), args[0])
			}
			return o.run(cmd, format())
		},
	}
	o.config = newConfigFlags(cmd)
	cmd.ValidArgsFunction = completeQuotaNames(o.config, "dq/")
	registerLiveCompletions(cmd, o.config)
	f := cmd.Flags()
	f.StringVarP(&o.file, "filename", "f", "", "DownstreamQuota manifest to plan (YAML or JSON, - for stdin); with --contract, the quotas sharing it")
	f.StringVar(&o.contract, "contract", "", "DownstreamContract manifest to split over the quotas of -f that name it (- for stdin)")
	f.StringToIntVar(&o.callerReplicas, "caller-replicas", nil, "with --contract, Ready pods of one caller, NAMESPACE/NAME=COUNT (repeatable)")
	f.Int32Var(&o.replicas, "replicas", 0, "replica count to divide the contract by")
	f.StringVar(&o.replicasRange, "replicas-range", "", "plan every replica count MIN..MAX, such as 2..20")
	f.BoolVar(&o.compare, "compare", false, "with --replicas-range, print only the permits in use at each count, now and under the previous division")
	f.Int32Var(&o.concurrency, "concurrency", 0, "global in-flight limit of the downstream (spec.contract.concurrency)")
	f.StringVar(&o.clusterShare, "cluster-share", "", "part of the contract this cluster may use: calls in flight such as 20, or a percentage such as 40% (spec.contract.clusterShare)")
	f.Int32Var(&o.rate, "rate", 0, "global rate limit in calls per second, 0 for none (spec.contract.ratePerSecond)")
	f.Int32Var(&o.burst, "burst", 0, "global burst above the rate (spec.contract.burst)")
	f.Int32Var(&o.safetyPercent, "safety-percent", quota.DefaultSafetyPercent, "part of the contract handed out, 1..100 (spec.safetyPercent)")
	f.DurationVar(&o.latency, "latency", 0, "typical latency of the downstream (spec.latency.typical)")
	f.DurationVar(&o.worstLatency, "worst-latency", 0, "worst latency of the downstream (spec.latency.worst)")
	f.DurationVar(&o.deadline, "deadline", 0, "time one call may take, queue wait included (spec.deadline)")
	f.DurationVar(&o.maxQueueWait, "max-queue-wait", 0, "longest wait in the waiting room (spec.maxQueueWait)")
	f.DurationVar(&o.acquireTimeout, "acquire-timeout", 0, "longest wait for a permit (spec.acquireTimeout)")
	f.Int32Var(&o.demand, "demand", 0, "expected total demand in calls per second (spec.demand.ratePerSecond)")
	f.Int32Var(&o.demandInFlight, "demand-in-flight", 0, "most calls in flight the whole workload can use (spec.demand.inFlight)")
	f.Int32Var(&o.retries, "retries", 0, "most retries of one call (spec.retry.maxRetries)")
	f.Int32Var(&o.retryBudget, "retry-budget", 0, "global retries per second (spec.retry.budgetPerSecond)")
	f.StringVar(&o.belowOne, "below-one", string(quota.DefaultBelowOne), "Strict or AtLeastOne (spec.belowOne)")
	o.admission.register(f)
	return cmd
}

func (o *planOptions) run(cmd *cobra.Command, format string) error {
	flags := cmd.Flags()
	if o.contract != "" {
		return o.runContract(cmd, format)
	}
	if flags.Changed("caller-replicas") {
		return errors.New("--caller-replicas: needs --contract FILE")
	}
	if !flags.Changed("replicas") && !flags.Changed("replicas-range") {
		return errors.New("--replicas: required, or --replicas-range MIN..MAX for a sweep (a quota does not say how many replicas call it)")
	}
	if err := o.checkDivisorFlags(flags); err != nil {
		return err
	}
	var quota v1alpha1.DownstreamQuota
	if o.file != "" {
		q, err := loadQuota(o.file, cmd.InOrStdin())
		if err != nil {
			return err
		}
		quota = *q
		if ref := quota.Spec.ContractRef; ref != nil && quota.Spec.Contract == nil {
			return fmt.Errorf("%s: spec.contractRef: the quota's part of the shared DownstreamContract %q depends on the other callers; plan needs a quota with its own spec.contract", o.file, ref.Name)
		}
	} else {
		for _, name := range requiredWithoutFile {
			if !flags.Changed(name) {
				return fmt.Errorf("--%s: required when no -f FILE gives it", name)
			}
		}
	}
	if err := o.applyFlags(flags, &quota.Spec); err != nil {
		return err
	}
	var lo, hi int32
	if o.replicasRange != "" {
		var err error
		if lo, hi, err = parseRange(o.replicasRange); err != nil {
			return err
		}
	}
	return o.print(cmd, format, quota, lo, hi)
}

// checkDivisorFlags rejects the combinations of --replicas,
// --replicas-range and --compare that say nothing or two things.
func (o *planOptions) checkDivisorFlags(flags *pflag.FlagSet) error {
	switch {
	case flags.Changed("replicas") && flags.Changed("replicas-range"):
		return errors.New("--replicas, --replicas-range: give one, not both")
	case o.compare && flags.Changed("replicas"):
		return errors.New("--compare: needs --replicas-range MIN..MAX")
	case o.compare && !flags.Changed("replicas-range") && o.live == "":
		return errors.New("--compare: needs --replicas-range MIN..MAX")
	}
	return nil
}

// applyFlags checks the flags that override the quota's spec and applies
// them to spec.
func (o *planOptions) applyFlags(flags *pflag.FlagSet, spec *v1alpha1.DownstreamQuotaSpec) error {
	// The API defaults these fields when empty, so an explicit empty flag
	// would be silently replaced by the default: refuse it instead.
	if flags.Changed("safety-percent") && o.safetyPercent == 0 {
		return errors.New("--safety-percent: must be between 1 and 100, got 0")
	}
	if flags.Changed("demand") && o.demand < 1 {
		return fmt.Errorf("--demand: must be at least 1, got %d", o.demand)
	}
	if flags.Changed("below-one") && o.belowOne == "" {
		return fmt.Errorf("--below-one: must be %s or %s, got \"\"", v1alpha1.BelowOneStrict, v1alpha1.BelowOneAtLeastOne)
	}
	share, err := o.parseClusterShare(flags)
	if err != nil {
		return err
	}
	o.override(flags, spec, share)
	return nil
}

// print plans q over lo..hi replicas, or over --replicas when hi is 0,
// and prints the plan in format.
func (o *planOptions) print(cmd *cobra.Command, format string, q v1alpha1.DownstreamQuota, lo, hi int32) error {
	flags := cmd.Flags()
	out := cmd.OutOrStdout()
	if hi > 0 {
		in, sweep, err := quota.Sweep(q.Spec, lo, hi)
		if err != nil {
			return o.explain(flags, err)
		}
		boot := bootstrapOf(sweep, hi)
		if structured(format) {
			return writeOutput(out, format, sweepBootstrapJSON{sweepJSON: sweepJSONOf(sweep), Bootstrap: boot})
		}
		if o.compare {
			err = writeCompareTable(out, q.Name, in, sweep)
		} else {
			err = writeSweepTable(out, q.Name, in, sweep)
		}
		if err != nil {
			return err
		}
		return writeBootstrap(out, boot)
	}
	plan, err := quota.Size(q.Spec, o.replicas)
	if err != nil {
		return o.explain(flags, err)
	}
	if flags.Changed("offered-load") {
		return o.printAdmission(out, format, q, plan)
	}
	if structured(format) {
		return writeOutput(out, format, planJSONOf(plan))
	}
	return writePlanTable(out, q.Name, q.Spec.Downstream, plan)
}

// parseClusterShare parses --cluster-share: a count of calls in flight, or
// a percentage ending in %.
func (o *planOptions) parseClusterShare(flags *pflag.FlagSet) (*v1alpha1.ClusterShare, error) {
	if !flags.Changed("cluster-share") {
		return nil, nil
	}
	text, isPercent := strings.CutSuffix(strings.TrimSpace(o.clusterShare), "%")
	v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--cluster-share: must be calls in flight such as 20 or a percentage such as 40%%, got %q", o.clusterShare)
	}
	n := int32(v)
	if isPercent {
		return &v1alpha1.ClusterShare{Percent: &n}, nil
	}
	return &v1alpha1.ClusterShare{Concurrency: &n}, nil
}

// override copies every flag that was set into spec.
func (o *planOptions) override(flags *pflag.FlagSet, spec *v1alpha1.DownstreamQuotaSpec, share *v1alpha1.ClusterShare) {
	set := flags.Changed
	if spec.Contract == nil && (set("concurrency") || set("rate") || set("burst") || set("cluster-share")) {
		spec.Contract = &v1alpha1.Contract{}
	}
	if share != nil {
		spec.Contract.ClusterShare = share
	}
	if set("concurrency") {
		spec.Contract.Concurrency = o.concurrency
	}
	if set("rate") {
		spec.Contract.RatePerSecond = o.rate
	}
	if set("burst") {
		spec.Contract.Burst = o.burst
	}
	if set("safety-percent") {
		spec.SafetyPercent = o.safetyPercent
	}
	if set("latency") {
		spec.Latency.Typical = metav1.Duration{Duration: o.latency}
	}
	if set("worst-latency") {
		spec.Latency.Worst = &metav1.Duration{Duration: o.worstLatency}
	}
	if set("deadline") {
		spec.Deadline = metav1.Duration{Duration: o.deadline}
	}
	if set("max-queue-wait") {
		spec.MaxQueueWait = &metav1.Duration{Duration: o.maxQueueWait}
	}
	if set("acquire-timeout") {
		spec.AcquireTimeout = &metav1.Duration{Duration: o.acquireTimeout}
	}
	if set("demand") {
		spec.Demand = &v1alpha1.Demand{RatePerSecond: o.demand}
	}
	if set("demand-in-flight") {
		if spec.Demand == nil {
			spec.Demand = &v1alpha1.Demand{}
		}
		spec.Demand.InFlight = &o.demandInFlight
	}
	if set("retries") {
		spec.Retry.MaxRetries = o.retries
	}
	if set("retry-budget") {
		spec.Retry.BudgetPerSecond = o.retryBudget
	}
	if set("below-one") {
		spec.BelowOne = v1alpha1.BelowOnePolicy(o.belowOne)
	}
}

// explain names the flag behind a field error when a flag gave the value,
// and the file and field otherwise.
func (o *planOptions) explain(flags *pflag.FlagSet, err error) error {
	var fe *quota.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	field := fe.Field
	if field == quota.MaxReplicasField {
		field = quota.MinReplicasField
	}
	for flag, path := range planFlagFields {
		// The cluster share's errors name its sub-fields.
		matches := path == field || (flag == "cluster-share" && strings.HasPrefix(field, path+"."))
		if matches && (flags.Changed(flag) || (o.file == "" && o.live == "")) {
			return fmt.Errorf("--%s: %s", flag, fe.Detail)
		}
	}
	source := o.file
	if o.live != "" {
		source = o.live
	}
	return fmt.Errorf("%s: %s: %s", source, fe.Field, fe.Detail)
}

// parseRange parses MIN..MAX.
func parseRange(s string) (int32, int32, error) {
	lo, hi, ok := strings.Cut(s, "..")
	if ok {
		l, errLo := strconv.ParseInt(strings.TrimSpace(lo), 10, 32)
		h, errHi := strconv.ParseInt(strings.TrimSpace(hi), 10, 32)
		if errLo == nil && errHi == nil {
			if l < 1 {
				return 0, 0, fmt.Errorf("--replicas-range: MIN must be at least 1, got %d", l)
			}
			if h < l {
				return 0, 0, fmt.Errorf("--replicas-range: MAX must be at least MIN %d, got %d", l, h)
			}
			return int32(l), int32(h), nil
		}
	}
	return 0, 0, fmt.Errorf("--replicas-range: must be MIN..MAX such as 2..20, got %q", s)
}
