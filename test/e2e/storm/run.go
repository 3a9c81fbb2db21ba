//go:build unix

package storm

import (
	"context"
	"path/filepath"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
)

// Namespace returns the namespace a variant runs in.
func Namespace(v Variant) string { return "storm-" + v.Name }

// Run runs one variant on the schedule s in a fresh namespace (see Play),
// and returns its figures, judged by the variant's goals. An error means
// the harness could not run the scenario (a process that did not start, an
// API call that failed), not that a goal was missed.
func (h *Harness) Run(ctx context.Context, v Variant, s schedule.Schedule) (*report.VariantReport, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	sc, err := h.variantScenario(v, s)
	if err != nil {
		return nil, err
	}
	rec, err := h.Play(ctx, sc)
	if err != nil {
		return nil, err
	}
	rep := report.Analyze(variantData(v, s, rec))
	judge(v, rep)
	return rep, nil
}

// variantScenario is the scenario of v on s: one workload of v's kind, the
// search gateway, in v's namespace, with its HPA (dictated when s has scale
// steps of its own) and, with the operator, its quota; its pods run v's
// program with v's plan.
func (h *Harness) variantScenario(v Variant, s schedule.Schedule) (Scenario, error) {
	dir := filepath.Join(h.OutDir, "manifests")
	if err := WriteManifests(dir); err != nil {
		return Scenario{}, err
	}
	files, err := VariantManifests(v.Kind, len(s.Scale) > 0, v.Operator)
	if err != nil {
		return Scenario{}, err
	}
	c := Caller{
		Name:              WorkloadName,
		Namespace:         Namespace(v),
		Kind:              v.Kind,
		Gate:              QuotaName,
		Plan:              v.Plan,
		Program:           h.podProgram(v),
		Laggard:           v.Laggard,
		RequestsPerSecond: s.RequestsPerSecond,
		InitialReplicas:   s.InitialReplicas,
		Scale:             s.Scale,
	}
	for _, f := range files {
		c.Manifests = append(c.Manifests, filepath.Join(dir, f))
	}
	if v.Operator {
		c.ConfigMap, c.Holds = ConfigMapName, Usable()
	}
	return Scenario{Name: v.Name, Duration: s.Duration, Latency: s.Latency, PodStartDelay: s.PodStartDelay,
		Callers: []Caller{c}, Events: v.Events}, nil
}

// variantData is what the run of v on s recorded, for its report.
func variantData(v Variant, s schedule.Schedule, rec *Recording) *report.RunData {
	c := rec.Callers[0]
	d := &report.RunData{
		Name:         v.Name,
		Description:  v.Description,
		Operator:     v.Operator,
		Plan:         v.Plan,
		LaggardDelay: v.Laggard,
		Downstream:   theDownstream,
		MaxRetries:   GatewayMaxRetries,
		Schedule:     s,
		Start:        rec.Start,
		Final:        rec.Final,
		Load:         c.Load,
		Scales:       c.Scales,
		Alive:        c.Alive,
		Published:    c.Published,
		Applied:      c.Applied,
		Rollout:      c.Rollout,
		Acks:         c.Acks,
		Laggard:      c.Laggard,
		PermitsCheck: c.PermitsCheck,
	}
	for _, sm := range rec.Samples {
		d.Samples = append(d.Samples, sm.Of(0))
	}
	return d
}
