package report

import (
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/schedule"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/traffic"
)

// SampleInterval is how often the harness samples the downstream and the
// workload.
const SampleInterval = 100 * time.Millisecond

// Sample is the state of one variant's run at one moment.
type Sample struct {
	// At is the offset from the start of the load.
	At time.Duration
	// Downstream are its counters; WindowPeak covers the interval since the
	// previous sample.
	Downstream traffic.DownstreamCounts
	// Pods are the workload's pod counts.
	Pods cluster.PodCounts
	// HPA is the HPA's status.
	HPA cluster.HPAStatus
	// Latency is the downstream's latency.
	Latency time.Duration
	// Permits is the sum of the running pods' permits.
	Permits int
	// ReadyPermits is the sum of the permits of the pods in the endpoints,
	// as each pod's gate enforces them.
	ReadyPermits int
	// LaggardRunning and LaggardReady say whether the variant's laggard pod
	// runs (not terminating) and is in the endpoints.
	LaggardRunning, LaggardReady bool
	// LaggardPermits is the permits the laggard's gate enforces.
	LaggardPermits int
}

// RunData is everything a variant's run recorded, before analysis.
type RunData struct {
	// Name is the variant's key in the report, Description what it stands
	// for.
	Name, Description string
	// Operator says whether the operator gave the pods their plans; Plan is
	// the fixed plan of a run without it.
	Operator bool
	Plan     *plan.Document
	// LaggardDelay is how late the laggard applied every new plan; 0 when
	// the run had no laggard.
	LaggardDelay time.Duration
	// Downstream is the downstream the run called.
	Downstream Downstream
	// MaxRetries is the gateway's retries of one call.
	MaxRetries int
	// Schedule is the run's timeline.
	Schedule schedule.Schedule
	// Start is when the load started; sample and record offsets count
	// from it.
	Start time.Time
	// Samples are taken every SampleInterval, in order, from offset 0.
	Samples []Sample
	// Final is the downstream's counters after the last request ended.
	Final traffic.DownstreamCounts
	// Load is the load generator's result.
	Load *traffic.LoadResult
	// Published, Applied and Rollout are the observations of the plans
	// (Published and Rollout are empty without the operator).
	Published []observe.Published
	Applied   []observe.Applied
	Rollout   []observe.RolloutSample
	// Alive names the pods still running at the end of the load.
	Alive []string
	// Acks are each alive pod's applied annotation at the end (operator
	// only).
	Acks map[string]string
	// Laggard names the pod that applied plans late, if any.
	Laggard string
	// PermitsCheck compares the logged permits of the pods running at the
	// end with their gates' metrics (operator only).
	PermitsCheck *observe.PermitsCheck
	// Scales are the autoscaler's steps as they happened.
	Scales []cluster.ScaleEvent
}

// Analyze turns a run's data into its report.
func Analyze(d *RunData) *VariantReport {
	r := &VariantReport{
		Name:        d.Name,
		Description: d.Description,
		HPAMetric:   cluster.DemandMetric,
		HPATarget:   cluster.DemandTarget,
	}
	if len(d.Schedule.Scale) > 0 {
		r.HPAMetric, r.HPATarget = cluster.ReplicasMetric, 1
	}
	if d.Plan != nil {
		r.StaticPermits = d.Plan.Permits
	}

	f := d.Final
	r.Downstream429 = f.Rejected
	r.DownstreamOK = f.OK
	r.DownstreamAbandoned = f.Abandoned
	r.DownstreamCalls = f.OK + f.Rejected + f.Abandoned + f.InFlight
	if r.DownstreamCalls > 0 {
		r.Downstream429Fraction = float64(f.Rejected) / float64(r.DownstreamCalls)
	}
	r.PeakInFlight = f.Peak
	if dur := d.Schedule.Duration.Seconds(); dur > 0 {
		r.GoodputPerSecond = float64(f.OK) / dur
	}

	l := d.Load
	r.LocalSheds = l.Outcomes[traffic.OutcomeShed]
	r.LocalShedReasons = l.ShedReasons
	var answered int64
	r.Load = LoadReport{
		TargetPerSecond:   l.Target,
		AchievedPerSecond: l.AchievedPerSecond(),
		Sent:              l.Sent(),
		Dropped:           l.Dropped,
		NoEndpoint:        l.NoEndpoint,
		Answered:          map[string]int64{},
		DownstreamErrors:  l.DownstreamStatuses,
		Errors:            l.Errors,
	}
	for o := range traffic.NumOutcomes {
		r.Load.Answered[o.String()] = l.Outcomes[o]
		answered += l.Outcomes[o]
	}
	if answered > 0 {
		r.LocalShedFraction = float64(r.LocalSheds) / float64(answered)
	}
	all := make([]time.Duration, 0, len(l.Records))
	var ok []time.Duration
	for _, rec := range l.Records {
		all = append(all, rec.Latency)
		if rec.Outcome == traffic.OutcomeOK {
			ok = append(ok, rec.Latency)
		}
	}
	q := QuantilesOf(all)
	r.GatewayP50Seconds, r.GatewayP99Seconds = q.P50.Seconds(), q.P99.Seconds()
	r.GatewayOKP99Seconds = Percentile(ok, 0.99).Seconds()

	r.Phases = phases(d)
	r.Timeline = timeline(d.Samples)
	r.RetryAmplification = retryAmplification(d)
	if d.Operator {
		r.ReloadLatencySeconds = latencyReport(ReloadLatencies(d.Published, d.Applied))
		r.Plans = plans(d)
		r.Rollout = Rollout(d.Published, d.Rollout, d.Alive, d.Acks)
		r.ScaleSteps = scaleSteps(d)
		r.Capacity = capacity(d, r.Timeline)
		r.Laggard = d.Laggard
		r.PermitsCheck = d.PermitsCheck
	}
	return r
}

// at returns the last sample taken at or before offset t, or the first.
func at(samples []Sample, t time.Duration) Sample {
	i := int(t / SampleInterval)
	i = min(max(i, 0), len(samples)-1)
	for i > 0 && samples[i].At > t {
		i--
	}
	for i+1 < len(samples) && samples[i+1].At <= t {
		i++
	}
	return samples[i]
}

func phases(d *RunData) []PhaseReport {
	if len(d.Samples) == 0 {
		return nil
	}
	var out []PhaseReport
	for _, p := range d.Schedule.Phases {
		pr := PhaseReport{Name: p.Name, From: p.From.Seconds(), To: p.To.Seconds(), Steady: p.Steady}
		from, to := p.Window()
		if a, b := at(d.Samples, from), at(d.Samples, to); b.At > a.At {
			pr.MeasuredSeconds = (b.At - a.At).Seconds()
			pr.GoodputPerSecond = float64(b.Downstream.OK-a.Downstream.OK) / pr.MeasuredSeconds
		}
		start, end := at(d.Samples, p.From), at(d.Samples, p.To)
		pr.Downstream429 = end.Downstream.Rejected - start.Downstream.Rejected
		pr.ReadyPodsAtEnd = end.Pods.Ready
		for _, s := range d.Samples {
			// A sample's window peak covers the interval before it.
			if s.At > p.From && s.At <= p.To+SampleInterval {
				pr.PeakInFlight = max(pr.PeakInFlight, s.Downstream.WindowPeak)
			}
		}
		var lat []time.Duration
		for _, rec := range d.Load.Records {
			if rec.At >= p.From && rec.At < p.To {
				lat = append(lat, rec.Latency)
				if rec.Outcome == traffic.OutcomeShed {
					pr.LocalSheds++
				}
			}
		}
		pr.GatewayP99 = Percentile(lat, 0.99).Seconds()
		out = append(out, pr)
	}
	return out
}

func timeline(samples []Sample) []TimelinePoint {
	out := make([]TimelinePoint, 0, len(samples))
	var prev traffic.DownstreamCounts
	for _, s := range samples {
		out = append(out, TimelinePoint{
			At:             s.At.Seconds(),
			InFlight:       s.Downstream.WindowPeak,
			Rejected429:    s.Downstream.Rejected - prev.Rejected,
			OK:             s.Downstream.OK - prev.OK,
			Desired:        s.Pods.Desired,
			Existing:       s.Pods.Existing,
			Ready:          s.Pods.Ready,
			LatencySeconds: s.Latency.Seconds(),
			Permits:        s.Permits,
			ReadyPermits:   s.ReadyPermits,
			LaggardPermits: s.LaggardPermits,
			HPADesired:     s.HPA.Desired,
		})
		if s.HPA.MetricOK {
			m := s.HPA.Metric
			out[len(out)-1].HPAMetric = &m
		}
		prev = s.Downstream
	}
	return out
}

// ReloadLatencies returns, for every plan published while pods were
// running, the time from the harness seeing it to each of those pods
// applying it. A pod's first application is its start, not a reload, and
// counts only for plans published after it. Only a pod's first line of a
// plan counts: it logs the hash again when its plan's source lapses and
// when that lapse ends, which is no reload.
func ReloadLatencies(published []observe.Published, applied []observe.Applied) []time.Duration {
	first := map[string]time.Time{}
	for _, a := range applied {
		if t, ok := first[a.Pod]; !ok || a.Time.Before(t) {
			first[a.Pod] = a.Time
		}
	}
	seen := map[string]time.Time{}
	for _, p := range published {
		if _, ok := seen[p.Hash]; !ok {
			seen[p.Hash] = p.Seen
		}
	}
	done := map[[2]string]bool{}
	var out []time.Duration
	for _, a := range applied {
		s, ok := seen[a.Hash]
		key := [2]string{a.Pod, a.Hash}
		if !ok || done[key] || !first[a.Pod].Before(s) {
			continue
		}
		done[key] = true
		// The pod's watch and the harness's see the same event; a pod can
		// be a hair ahead of the harness.
		out = append(out, max(0, a.Time.Sub(s)))
	}
	return out
}

func plans(d *RunData) []PlanReport {
	var out []PlanReport
	for _, p := range d.Published {
		pr := PlanReport{At: p.Seen.Sub(d.Start).Seconds(), Hash: p.Hash, Permits: p.Permits}
		pods := map[string]bool{}
		for _, a := range d.Applied {
			if a.Hash == p.Hash {
				pods[a.Pod] = true
			}
		}
		pr.AppliedBy = len(pods)
		out = append(out, pr)
	}
	return out
}

// Rollout returns the rollout report of a quota: its last published plan
// (the last of published), its last rollout status, and the pods alive at
// the end whose applied annotation (acks) is not that plan's.
func Rollout(published []observe.Published, rollout []observe.RolloutSample, alive []string, acks map[string]string) *RolloutReport {
	r := &RolloutReport{}
	var last observe.Published
	if n := len(published); n > 0 {
		last = published[n-1]
		r.Last = last.Ack().String()
	}
	if n := len(rollout); n > 0 {
		s := rollout[n-1]
		r.Acknowledged, r.Total = s.Acknowledged, s.Total
		r.Current = s.Epoch == last.Epoch && s.Revision == last.Revision
	}
	for _, pod := range alive {
		if acks[pod] != r.Last {
			r.StalePods++
		}
	}
	return r
}

// scaleSteps measures how the operator followed each of the autoscaler's
// steps: the time to publish the first plan after the decision, and the
// time until every pod running at the decision, and still running when the
// step's last plan came, applied that last plan.
func scaleSteps(d *RunData) []ScaleStepReport {
	var out []ScaleStepReport
	for i, sc := range d.Scales {
		end := d.Start.Add(d.Schedule.Duration)
		if i+1 < len(d.Scales) {
			end = d.Scales[i+1].At
		}
		r := ScaleStepReport{At: sc.At.Sub(d.Start).Seconds(), From: sc.From, To: sc.To}
		var first, last *observe.Published
		for j := range d.Published {
			p := &d.Published[j]
			if p.Seen.After(sc.At) && p.Seen.Before(end) {
				if first == nil {
					first = p
				}
				last = p
				r.Plans++
			}
		}
		if first == nil {
			out = append(out, r)
			continue
		}
		r.FirstPlanSeconds = first.Seen.Sub(sc.At).Seconds()
		r.SettledPlanSeconds = last.Seen.Sub(sc.At).Seconds()
		r.SettledHandedOut = last.HandedOut()
		// Pods running at the decision: their first application is before it.
		running := map[string]bool{}
		for _, a := range d.Applied {
			if a.Time.Before(sc.At) {
				running[a.Pod] = true
			}
		}
		var lat []time.Duration
		seen := map[string]bool{}
		for _, a := range d.Applied {
			if a.Hash == last.Hash && running[a.Pod] && !seen[a.Pod] {
				seen[a.Pod] = true
				lat = append(lat, a.Time.Sub(sc.At))
			}
		}
		r.AppliedBy = len(lat)
		if len(lat) > 0 {
			q := QuantilesOf(lat)
			r.AppliedP50Seconds, r.AppliedMaxSeconds = q.P50.Seconds(), q.Max.Seconds()
		}
		out = append(out, r)
	}
	return out
}
