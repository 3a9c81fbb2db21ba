//go:build unix

package storm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// ContractName is the DownstreamContract of the two-callers scenario.
const ContractName = "logistics-api"

// CallerSpec is one workload of the two-callers scenario: a Deployment and
// its HPA in a namespace of its own, and a DownstreamQuota that names the
// shared contract.
type CallerSpec struct {
	// Name is the Deployment's (and HPA's) name; the quota, and so the gate,
	// is QuotaName in every caller's namespace.
	Name      string
	Namespace string
	// Weight and DemandInFlight are the quota's spec.weight and
	// spec.demand.inFlight (0: no demand stated, unbounded).
	Weight         int32
	DemandInFlight int32
	// Part is the permits the caller must get once every caller has Ready
	// pods, worked out by hand from the weights, the demands and the
	// contract (see TwoCallers): the figure the operator's split is checked
	// against.
	Part int64
	// RequestsPerSecond is the open-loop load over the caller's Ready pods.
	RequestsPerSecond float64
	// InitialReplicas run before the load starts; Scale are the caller's
	// autoscaler's steps.
	InitialReplicas int32
	Scale           []schedule.ScaleStep
}

// CallersScenario is several workloads calling one downstream whose
// contract they share through one DownstreamContract, each scaling on its
// own schedule.
type CallersScenario struct {
	// Name names the run in the logs and its directories ("two-callers"
	// when empty).
	Name          string
	Duration      time.Duration
	PodStartDelay time.Duration
	Callers       []CallerSpec
	// Checkpoints are the moments at which each caller's Ready pods must
	// hold its part.
	Checkpoints []report.CallersCheckpoint
	// Contract names the shared DownstreamContract (ContractName when
	// empty).
	Contract string
	// NamespaceLabels, when set, label every caller's namespace, and the
	// contract admits the namespaces that carry them; without them it
	// admits every namespace.
	NamespaceLabels map[string]string
	// Events happen while the load runs (see Scenario.Events).
	Events []Event
}

// contract returns the name of the scenario's DownstreamContract.
func (cs CallersScenario) contract() string {
	if cs.Contract == "" {
		return ContractName
	}
	return cs.Contract
}

// replicasAt returns the replicas the caller's autoscaler has been asked
// for at t.
func (c CallerSpec) replicasAt(t time.Duration) int32 {
	return schedule.Schedule{InitialReplicas: c.InitialReplicas, Scale: c.Scale}.ReplicasAt(t)
}

// TwoCallers is the two-callers scenario, 33 seconds at the typical latency:
// the search gateway (weight 1, no demand stated, 1,200 requests/s) scales
// 4 → 8 at 8 s and 8 → 3 at 22 s; the checkout gateway (weight 3, demand 24
// in flight, 600 requests/s) scales 2 → 6 at 14 s.
//
// Their parts, by weighted max-min fairness, worked out by hand: the usable
// permits are floor(50 × 80 / 100) = 40; by weight alone search would get
// 40 × 1/4 = 10 and checkout 40 × 3/4 = 30, but checkout states a demand of
// 24 < 30, so it gets 24 and the 40 − 24 = 16 left go to search, which
// states none. Search 16, checkout 24.
//
// The scenario asks the HPAs for those steps; each acts within its sync
// period (2 s). The first three checkpoints leave every step 5 s or more
// from its HPA's decision to settle, and come before the next step can
// change a caller's Ready pods: the one at 15 s follows checkout's step at
// 14 s, but no new pod is Ready sooner than the pod start delay (1.5 s)
// after the HPA acts. The last one follows search's scale-down 8 → 3, whose
// end depends on the departing pods draining their calls and exiting, which
// a loaded machine slows: it polls from 24 s (the HPA has decided by then)
// for search's 3 Ready pods holding its 16 permits, and fails when that has
// not happened by 32 s, 10 s after the step was asked for.
func TwoCallers() CallersScenario {
	return CallersScenario{
		Duration:      33 * time.Second,
		PodStartDelay: 1500 * time.Millisecond,
		Callers: []CallerSpec{
			{Name: "search-gateway", Namespace: "storm-callers-search", Weight: 1, Part: 16, RequestsPerSecond: 1200, InitialReplicas: 4,
				Scale: []schedule.ScaleStep{{At: 8 * time.Second, Replicas: 8}, {At: 22 * time.Second, Replicas: 3}}},
			{Name: "checkout-gateway", Namespace: "storm-callers-checkout", Weight: 3, DemandInFlight: 24, Part: 24, RequestsPerSecond: 600, InitialReplicas: 2,
				Scale: []schedule.ScaleStep{{At: 14 * time.Second, Replicas: 6}}},
		},
		Checkpoints: []report.CallersCheckpoint{
			{At: 7500 * time.Millisecond}, {At: 15 * time.Second}, {At: 21500 * time.Millisecond},
			{At: 22*time.Second + cluster.HPASyncPeriod, Within: 8 * time.Second},
		},
	}
}

// Validate reports a scenario the harness cannot run.
func (cs CallersScenario) Validate() error {
	var errs []error
	if cs.Duration <= 0 {
		errs = append(errs, errors.New("duration must be positive"))
	}
	if len(cs.Callers) < 2 {
		errs = append(errs, errors.New("at least two callers"))
	}
	var parts int64
	for _, c := range cs.Callers {
		parts += c.Part
		s := schedule.Schedule{Duration: cs.Duration, RequestsPerSecond: c.RequestsPerSecond, InitialReplicas: c.InitialReplicas,
			Latency: []schedule.LatencyStep{{Latency: TypicalLatency}}, Scale: c.Scale}
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("caller %s: %w", c.Name, err))
		}
		if c.Weight < 1 || c.DemandInFlight < 0 {
			errs = append(errs, fmt.Errorf("caller %s: weight %d must be at least 1, demand %d at least 0", c.Name, c.Weight, c.DemandInFlight))
		}
	}
	// Every usable permit goes to some caller: a part worked out wrong by
	// hand shows here rather than as a missed goal after a run.
	if parts != int64(Usable()) {
		errs = append(errs, fmt.Errorf("the callers' parts add up to %d, not the %d usable permits", parts, Usable()))
	}
	for _, cp := range cs.Checkpoints {
		if cp.At <= 0 || cp.Within < 0 || cp.End() >= cs.Duration {
			errs = append(errs, fmt.Errorf("checkpoint at %v within %v outside the run", cp.At, cp.Within))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("storm: invalid callers scenario: %w", errors.Join(errs...))
	}
	return nil
}

// data returns the scenario's data for its report, yet without what a run
// records.
func (cs CallersScenario) data() *report.CallersData {
	d := &report.CallersData{Downstream: theDownstream, Duration: cs.Duration, Checkpoints: cs.Checkpoints}
	for _, c := range cs.Callers {
		d.Callers = append(d.Callers, report.Caller{Name: c.Name, Namespace: c.Namespace, Quota: QuotaName, Weight: c.Weight,
			DemandInFlight: c.DemandInFlight, Part: c.Part, InitialReplicas: c.InitialReplicas, Scale: c.Scale})
	}
	return d
}

// ContractObject returns the two-callers scenario's DownstreamContract: the
// quota's contract, shared, admitting every namespace.
func ContractObject() (*v1alpha1.DownstreamContract, error) { return contractObject(ContractName, nil) }

// contractObject returns the DownstreamContract name: the quota's contract,
// shared with the namespaces labelled with labels (every namespace when
// there are none).
func contractObject(name string, labels map[string]string) (*v1alpha1.DownstreamContract, error) {
	q, err := Quota()
	if err != nil {
		return nil, err
	}
	return &v1alpha1.DownstreamContract{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DownstreamContract"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.DownstreamContractSpec{
			Downstream:           q.Spec.Downstream,
			Contract:             *q.Spec.Contract,
			SafetyPercent:        q.Spec.SafetyPercent,
			RetryBudgetPerSecond: q.Spec.Retry.BudgetPerSecond,
			// Each namespace weighs what its callers state: the scenario
			// measures the weighted split, not the tenancy cap.
			NamespaceSelector:     &metav1.LabelSelector{MatchLabels: labels},
			MaxWeightPerNamespace: 1000,
		},
	}, nil
}

// CallerObjects returns a caller's Deployment, HPA and DownstreamQuota
// naming the two-callers scenario's contract, made from the scenario's
// manifests.
func CallerObjects(c CallerSpec) ([]client.Object, error) { return callerObjects(c, ContractName) }

// callerObjects returns a caller's Deployment, HPA and DownstreamQuota
// naming the DownstreamContract contract.
func callerObjects(c CallerSpec, contract string) ([]client.Object, error) {
	var dep appsv1.Deployment
	var hpa autoscalingv2.HorizontalPodAutoscaler
	for name, obj := range map[string]any{"deployment.yaml": &dep, "hpa.yaml": &hpa} {
		b, err := manifests.ReadFile("manifests/" + name)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			return nil, fmt.Errorf("storm: %s: %w", name, err)
		}
	}
	labels := map[string]string{"app.kubernetes.io/name": c.Name}
	dep.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
	dep.Name, dep.Namespace, dep.Labels = c.Name, c.Namespace, labels
	dep.Spec.Replicas = &c.InitialReplicas
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	dep.Spec.Template.Labels = labels
	hpa.TypeMeta = metav1.TypeMeta{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler"}
	hpa.Name, hpa.Namespace = c.Name, c.Namespace
	hpa.Spec.ScaleTargetRef.Name = c.Name
	cluster.DictateHPA(&hpa)

	q, err := Quota()
	if err != nil {
		return nil, err
	}
	q.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "DownstreamQuota"}
	q.Namespace = c.Namespace
	q.Spec.WorkloadRef.Name, q.Spec.HPAName = c.Name, c.Name
	q.Spec.Contract, q.Spec.SafetyPercent = nil, 0
	q.Spec.ContractRef = &v1alpha1.ContractReference{Name: contract}
	q.Spec.Weight = c.Weight
	q.Spec.Demand = nil
	if c.DemandInFlight > 0 {
		q.Spec.Demand = &v1alpha1.Demand{InFlight: ptrTo(c.DemandInFlight)}
	}
	return []client.Object{&dep, &hpa, q}, nil
}

func ptrTo[T any](v T) *T { return &v }

// RunCallers runs the scenario (see Play): the contract, each caller's
// objects and pods, one downstream for all, each caller's load and
// autoscaler, and the sampling of all of it; it returns the report, judged
// by the scenario's goals. An error means the harness could not run it.
func (h *Harness) RunCallers(ctx context.Context, cs CallersScenario) (*report.CallersReport, error) {
	if err := cs.Validate(); err != nil {
		return nil, err
	}
	sc, err := h.callersScenario(cs)
	if err != nil {
		return nil, err
	}
	h.logf("[%s] The DownstreamContract and, per caller, a Deployment, its HPA and a DownstreamQuota naming the contract", sc.Name)
	rec, err := h.Play(ctx, sc)
	if err != nil {
		return nil, err
	}
	return analyzeCallers(cs.recorded(rec)), nil
}

// recorded returns the scenario's data with what the run recorded.
func (cs CallersScenario) recorded(rec *Recording) *report.CallersData {
	d := cs.data()
	d.Samples, d.Final, d.Status = rec.Samples, rec.Final, rec.Contract
	for _, c := range rec.Callers {
		d.Loads = append(d.Loads, c.Load)
		d.Rollouts = append(d.Rollouts, report.Rollout(c.Published, c.Rollout, c.Alive, c.Acks))
		d.PermitsChecks = append(d.PermitsChecks, c.PermitsCheck)
	}
	return d
}

// callersScenario is the scenario of cs: the shared contract and each
// caller's objects, its pods running examples/gateway on the operator's
// plan, each holding its part once settled.
func (h *Harness) callersScenario(cs CallersScenario) (Scenario, error) {
	dc, err := contractObject(cs.contract(), cs.NamespaceLabels)
	if err != nil {
		return Scenario{}, err
	}
	sc := Scenario{Name: cmp.Or(cs.Name, "two-callers"), Duration: cs.Duration, PodStartDelay: cs.PodStartDelay,
		Latency: []schedule.LatencyStep{{Latency: TypicalLatency}}, Objects: []client.Object{dc}, Contract: cs.contract(), Events: cs.Events}
	for _, c := range cs.Callers {
		objs, err := callerObjects(c, cs.contract())
		if err != nil {
			return Scenario{}, err
		}
		sc.Objects = append(sc.Objects, objs...)
		sc.Callers = append(sc.Callers, Caller{Name: c.Name, Namespace: c.Namespace, NamespaceLabels: cs.NamespaceLabels, Gate: QuotaName,
			ConfigMap: c.Name + v1alpha1.ConfigMapSuffix, Program: h.gateway, RequestsPerSecond: c.RequestsPerSecond,
			InitialReplicas: c.InitialReplicas, Scale: c.Scale, Holds: int(c.Part)})
	}
	return sc, nil
}

// analyzeCallers turns the scenario's data into its report and judges its
// goals.
func analyzeCallers(d *report.CallersData) *report.CallersReport {
	r := report.AnalyzeCallers(d)
	r.Goals = callersGoals(r)
	return r
}

// callersGoals are the goals of the two-callers scenario: the shared
// contract kept, and each caller given its part, in the contract's status
// and in its Ready pods' gates at every checkpoint, acknowledged.
func callersGoals(r *report.CallersReport) report.Goals {
	const name = "two-callers"
	var gs report.Goals
	add := func(goal, want, got string, met, asserted bool) { gs.Add(name, goal, want, got, met, asserted) }
	add("peak in-flight at the shared downstream within the contract", fmt.Sprintf("≤ %d", r.Contract),
		fmt.Sprint(r.PeakInFlight), r.PeakInFlight <= int64(r.Contract), true)
	add("downstream 429s", "0", fmt.Sprint(r.Downstream429), r.Downstream429 == 0, true)
	for _, c := range r.Callers {
		add(c.Name+"'s part in the contract's status", fmt.Sprintf("%d (its weighted max-min part)", c.FairPart),
			fmt.Sprint(c.StatusPart), int64(c.StatusPart) == c.FairPart, true)
		var got []string
		met := len(c.Checkpoints) > 0
		for _, cp := range c.Checkpoints {
			got = append(got, cp.String())
			met = met && cp.Met(c.FairPart)
		}
		add(c.Name+"'s Ready pods hold its fair part at every checkpoint", fmt.Sprintf("%d", c.FairPart), strings.Join(got, "; "), met, true)
		if ro := c.Rollout; ro != nil {
			add(c.Name+"'s running pods acknowledged its last plan", "acknowledged = total, 0 stale pods, at "+ro.Last,
				fmt.Sprintf("%d/%d acknowledged, %d stale, status current: %t", ro.Acknowledged, ro.Total, ro.StalePods, ro.Current),
				ro.Current && ro.Acknowledged == ro.Total && ro.StalePods == 0, true)
		}
		if pc := c.PermitsCheck; pc != nil {
			got := fmt.Sprintf("%d of %d pods agree", pc.Agree, pc.Pods)
			if len(pc.Disagreements) > 0 {
				got += ": " + strings.Join(pc.Disagreements, "; ")
			}
			add(c.Name+"'s pods' backpressure_gate_permits metric equals their logged permits", "every running pod", got,
				pc.Pods > 0 && pc.Agree == pc.Pods, true)
		}
		add(c.Name+": the harness kept up with the load", fmt.Sprintf("≥ %.0f%% of %.0f/s", 100*report.LoadGoalFraction, c.LoadTargetPerSecond),
			fmt.Sprintf("%.0f/s", c.LoadAchievedPerSecond), c.LoadAchievedPerSecond >= report.LoadGoalFraction*c.LoadTargetPerSecond, false)
	}
	return gs
}
