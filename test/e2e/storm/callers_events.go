//go:build unix

package storm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/observe"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/report"
)

// The shared-contract events scenario's contract, namespace label, second
// quota and bound.
const (
	// EventsContractName is the DownstreamContract of the shared-contract
	// events scenario, apart from the two-callers scenario's.
	EventsContractName = "logistics-api-events"
	// EventsNamespaceLabel is the label the contract's namespaceSelector
	// matches (with the value "caller"); the checkout caller's namespace
	// loses it mid-run.
	EventsNamespaceLabel = "storm.backpressure.dev/logistics-api"
	// SecondQuotaName is the second DownstreamQuota of the search gateway
	// that joins the contract mid-run: a second gate of the same workload
	// to the same provider.
	SecondQuotaName = "logistics-api-bulk"
	// EventPlanBound is how soon after each event every quota of the
	// contract must see a newly published document in its ConfigMap.
	EventPlanBound = 10 * time.Second
)

// The events' names in the report, and their offsets from the start of the
// load.
const (
	eventNameDeleted     = "division deleted"
	eventNameSecondQuota = "second quota"
	eventNameTurnedAway  = "turned away"

	eventDivisionDeleted = 5 * time.Second
	eventSecondQuota     = 12 * time.Second
	eventTurnedAway      = 20 * time.Second
)

// SharedContractEvents is the two callers of TwoCallers, without scale
// steps (search 4 pods, checkout 2), in namespaces of their own and on a
// contract of their own that admits the namespaces labelled
// EventsNamespaceLabel, for 32 seconds with three events:
//
//   - at 5 s, the contract's status.division (its write-ahead record) is
//     deleted by a status patch, as an accident or a restore would;
//   - at 12 s, SecondQuotaName, a second quota of the search gateway
//     (weight 1, no demand), joins the contract;
//   - at 20 s, the checkout gateway's namespace loses the label: the
//     contract no longer admits it.
//
// The parts, worked out by hand (usable permits 40): before the second
// quota, search 16 and checkout 24 (see TwoCallers). With it, the search
// namespace weighs 1 + 1 = 2 against checkout's 3: 40 × 2/5 = 16 and
// 40 × 3/5 = 24, which is checkout's demand, so 16 for the search namespace,
// 8 for each of its two quotas. Once checkout is turned away its part is 0
// and the search namespace takes all 40: 20 for each quota.
func SharedContractEvents() CallersScenario {
	cs := TwoCallers()
	cs.Name, cs.Contract = "shared-contract-events", EventsContractName
	cs.Duration, cs.Checkpoints = 32*time.Second, nil
	cs.NamespaceLabels = map[string]string{EventsNamespaceLabel: "caller"}
	for i := range cs.Callers {
		c := &cs.Callers[i]
		c.Namespace = "storm-events-" + c.Namespace[len("storm-callers-"):]
		c.Scale = nil
	}
	return cs
}

// EventsFinalParts are the callers' parts once every event happened, by
// namespace/quota, worked out in SharedContractEvents' comment.
func EventsFinalParts() map[string]int32 {
	cs := SharedContractEvents()
	search, checkout := cs.Callers[0].Namespace, cs.Callers[1].Namespace
	return map[string]int32{search + "/" + QuotaName: 20, search + "/" + SecondQuotaName: 20, checkout + "/" + QuotaName: 0}
}

// ContractEventsReport is what the shared-contract events scenario
// measured.
type ContractEventsReport struct {
	// Run is the two callers' report: the shared downstream's peak
	// in-flight and 429s, and each caller's figures.
	Run *report.CallersReport `json:"run"`
	// Events are the three events, in the order they happened.
	Events []ContractEvent `json:"events"`
	// FinalParts are the callers' parts in the contract's last status, by
	// namespace/quota.
	FinalParts map[string]int32 `json:"finalParts"`
	// TurnedAwayPermits are the permits the turned-away caller's running
	// pods enforced at the end (their gates' logs); TurnedAwayLastPlan the
	// permits its last published document gives them together.
	TurnedAwayPermits  int `json:"turnedAwayPermits"`
	TurnedAwayLastPlan int `json:"turnedAwayLastPlan"`
	// SearchReadyPermits are the permits the search gateway's Ready pods
	// enforced at the end, for its first gate.
	SearchReadyPermits int `json:"searchReadyPermits"`
	// SecondQuotaLastPlan is what the second quota's last document gives
	// the search gateway's running pods together.
	SecondQuotaLastPlan int `json:"secondQuotaLastPlan"`
	// PeakTold is the most permits the three quotas' documents told the
	// pods together during the load (the second quota's share is enforced
	// by no process here, so the downstream's in-flight does not show it),
	// PeakToldAtSeconds when; UnnamedBase counts the documents that gave
	// pods they do not name a share, which PeakTold does not count.
	PeakTold          int     `json:"peakTold"`
	PeakToldAtSeconds float64 `json:"peakToldAtSeconds"`
	UnnamedBase       int     `json:"unnamedBase"`
	// RecordEpoch is the epoch of the contract's last status.division,
	// empty when it has none.
	RecordEpoch string `json:"recordEpoch"`
	// RevisionBeforeDeletion is the last revision published before the
	// record was deleted.
	RevisionBeforeDeletion int64 `json:"revisionBeforeDeletion"`
	// Documents are, per quota (namespace/name), every document the
	// harness saw published, in order.
	Documents map[string][]EventDocument `json:"documents"`
	// Goals are the scenario's goals.
	Goals report.Goals `json:"goals"`
}

// EventDocument is a published document, in short.
type EventDocument struct {
	AtSeconds float64 `json:"atSeconds"`
	Revision  int64   `json:"revision"`
	// Base is what a pod the document does not name enforces; Named the
	// named pods' permits, by pod.
	Base  int            `json:"base"`
	Named map[string]int `json:"named,omitempty"`
}

// ContractEvent is one event of the scenario and the documents each quota
// was published after it.
type ContractEvent struct {
	Name      string  `json:"name"`
	AtSeconds float64 `json:"atSeconds"`
	// NextSeconds is from the event to the next one (or the end of the
	// run).
	NextSeconds float64 `json:"nextSeconds"`
	// Plans are, per quota of the contract, the first new document seen in
	// its ConfigMap after the event.
	Plans []EventPlan `json:"plans"`
}

// EventPlan is a quota's first document published after an event.
type EventPlan struct {
	// Quota is namespace/name.
	Quota string `json:"quota"`
	// Seen is false when no new document came before the run ended.
	Seen bool `json:"seen"`
	// AfterSeconds is from the event to the harness's watch seeing it.
	AfterSeconds float64 `json:"afterSeconds"`
	Revision     int64   `json:"revision"`
	// BeforeNext says it came before the next event.
	BeforeNext bool `json:"beforeNext"`
}

// contractEvents records what the events did while the scenario runs.
type contractEvents struct {
	// at is when each event happened, by name.
	at map[string]time.Time
	// bulk observes the second quota's documents.
	bulk *observe.Observations
}

// RunContractEvents runs SharedContractEvents and judges its goals. An
// error means the harness could not run it.
func (h *Harness) RunContractEvents(ctx context.Context) (*ContractEventsReport, error) {
	cs := SharedContractEvents()
	search, checkout := cs.Callers[0], cs.Callers[1]
	ev := &contractEvents{at: map[string]time.Time{}, bulk: &observe.Observations{}}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go ev.bulk.WatchConfigMap(watchCtx, h.Client, search.Namespace, search.Name+v1alpha1.ConfigMapSuffix, SecondQuotaName)

	bulk, err := callerObjects(CallerSpec{Name: search.Name, Namespace: search.Namespace, Weight: 1}, cs.Contract)
	if err != nil {
		return nil, err
	}
	bulkQuota := bulk[2]
	bulkQuota.SetName(SecondQuotaName)
	cs.Events = []Event{
		{At: eventDivisionDeleted, Name: "the contract's status.division deleted", Do: func(ctx context.Context, _ *Stage) error {
			ev.at[eventNameDeleted] = time.Now()
			dc := &v1alpha1.DownstreamContract{ObjectMeta: metav1.ObjectMeta{Name: cs.Contract}}
			// A JSON patch's remove fails when there is no record to
			// remove: the event would not be what it says.
			return h.Client.Status().Patch(ctx, dc, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/status/division"}]`)))
		}},
		{At: eventSecondQuota, Name: "a second quota of " + search.Name + " joins the contract", Do: func(ctx context.Context, _ *Stage) error {
			ev.at[eventNameSecondQuota] = time.Now()
			return h.Client.Create(ctx, bulkQuota)
		}},
		{At: eventTurnedAway, Name: checkout.Namespace + " loses the label the contract selects", Do: func(context.Context, *Stage) error {
			ev.at[eventNameTurnedAway] = time.Now()
			return h.Kubectl("label", "namespace", checkout.Namespace, EventsNamespaceLabel+"-")
		}},
	}
	sc, err := h.callersScenario(cs)
	if err != nil {
		return nil, err
	}
	h.logf("[%s] The DownstreamContract admitting the namespaces labelled %s and, per caller, a Deployment, its HPA and a DownstreamQuota naming the contract", sc.Name, EventsNamespaceLabel)
	rec, err := h.Play(ctx, sc)
	if err != nil {
		return nil, err
	}
	stopWatch()
	return ev.analyze(cs, rec), nil
}

// analyze turns the run into its report: the documents after each event,
// the last parts and permits, and the goals.
func (ev *contractEvents) analyze(cs CallersScenario, rec *Recording) *ContractEventsReport {
	search, checkout := cs.Callers[0], cs.Callers[1]
	r := &ContractEventsReport{Run: report.AnalyzeCallers(cs.recorded(rec)), FinalParts: map[string]int32{}}
	if rec.Contract != nil {
		for _, c := range rec.Contract.Callers {
			r.FinalParts[c.Namespace+"/"+c.Quota] = c.Permits
		}
	}
	published := map[string][]observe.Published{
		search.Namespace + "/" + QuotaName:       rec.Callers[0].Published,
		checkout.Namespace + "/" + QuotaName:     rec.Callers[1].Published,
		search.Namespace + "/" + SecondQuotaName: ev.bulk.Published(),
	}
	quotas := slices.Sorted(maps.Keys(published))
	r.Documents = map[string][]EventDocument{}
	for q, docs := range published {
		for _, d := range docs {
			r.Documents[q] = append(r.Documents[q], EventDocument{AtSeconds: d.Seen.Sub(rec.Start).Seconds(), Revision: d.Revision, Base: d.Permits, Named: d.Pods})
		}
	}
	names := []string{eventNameDeleted, eventNameSecondQuota, eventNameTurnedAway}
	for i, name := range names {
		at, ok := ev.at[name]
		if !ok {
			continue
		}
		// The next event, or the end of the run.
		next := time.Now()
		if i+1 < len(names) {
			if t, ok := ev.at[names[i+1]]; ok {
				next = t
			}
		}
		e := ContractEvent{Name: name, AtSeconds: at.Sub(rec.Start).Seconds(), NextSeconds: next.Sub(at).Seconds()}
		for _, q := range quotas {
			// The second quota has no documents before it joins.
			if q == search.Namespace+"/"+SecondQuotaName && name == eventNameDeleted {
				continue
			}
			p := EventPlan{Quota: q}
			for _, doc := range published[q] {
				if !doc.Seen.After(at) {
					if name == eventNameDeleted {
						r.RevisionBeforeDeletion = max(r.RevisionBeforeDeletion, doc.Revision)
					}
					continue
				}
				p.Seen, p.AfterSeconds, p.Revision = true, doc.Seen.Sub(at).Seconds(), doc.Revision
				p.BeforeNext = doc.Seen.Before(next)
				break
			}
			e.Plans = append(e.Plans, p)
		}
		r.Events = append(r.Events, e)
	}
	r.TurnedAwayPermits, _ = checkoutPermits(rec)
	// The documents at the end of the load: in teardown, the workloads'
	// deletion changes them again.
	end := rec.Start.Add(cs.Duration)
	r.TurnedAwayLastPlan = lastPlanTotal(rec.Callers[1].Published, rec.Callers[1].Alive, end)
	r.SecondQuotaLastPlan = lastPlanTotal(ev.bulk.Published(), rec.Callers[0].Alive, end)
	r.PeakTold, r.PeakToldAtSeconds, r.UnnamedBase = peakTold(published, rec.Start, end)
	if rec.Contract != nil && rec.Contract.Division != nil {
		r.RecordEpoch = rec.Contract.Division.Epoch
	}
	if n := len(rec.Samples); n > 0 {
		r.SearchReadyPermits = rec.Samples[n-1].Callers[0].ReadyPermits
	}
	r.Goals = contractEventsGoals(r)
	return r
}

// checkoutPermits returns the permits the turned-away caller's pods
// enforced in the last sample, all of them and the Ready ones.
func checkoutPermits(rec *Recording) (all, ready int) {
	if n := len(rec.Samples); n > 0 {
		c := rec.Samples[n-1].Callers[1]
		return c.Permits, c.ReadyPermits
	}
	return -1, -1
}

// lastPlanTotal returns what the last of docs seen before end gives pods
// together, -1 without a document.
func lastPlanTotal(docs []observe.Published, pods []string, end time.Time) int {
	i := len(docs) - 1
	for i >= 0 && docs[i].Seen.After(end) {
		i--
	}
	if i < 0 {
		return -1
	}
	n := 0
	for _, pod := range pods {
		n += docs[i].PermitsOf(pod)
	}
	return n
}

// peakTold returns the most permits the quotas' documents told the pods
// together, each quota's last document seen counted, over the documents
// seen from start to end, and when; and the documents that gave the pods
// they do not name a share (counted as none here).
func peakTold(published map[string][]observe.Published, start, end time.Time) (peak int, at float64, unnamedBase int) {
	type seen struct {
		quota string
		doc   observe.Published
	}
	var all []seen
	for q, docs := range published {
		for _, d := range docs {
			all = append(all, seen{q, d})
			if d.Permits != 0 {
				unnamedBase++
			}
		}
	}
	slices.SortStableFunc(all, func(a, b seen) int { return a.doc.Seen.Compare(b.doc.Seen) })
	told := map[string]int{}
	for _, s := range all {
		if s.doc.Seen.After(end) {
			break
		}
		told[s.quota] = s.doc.HandedOut()
		sum := 0
		for _, n := range told {
			sum += n
		}
		if sum > peak && !s.doc.Seen.Before(start) {
			peak, at = sum, s.doc.Seen.Sub(start).Seconds()
		}
	}
	return peak, at, unnamedBase
}

// contractEventsGoals are the scenario's goals: the contract kept through
// the three events, every quota published again within EventPlanBound of
// each, and the parts they end with.
func contractEventsGoals(r *ContractEventsReport) report.Goals {
	const name = "shared-contract-events"
	var gs report.Goals
	add := func(goal, want, got string, met bool) { gs.Add(name, goal, want, got, met, true) }
	add("peak in-flight at the shared downstream within the contract", fmt.Sprintf("≤ %d", r.Run.Contract),
		fmt.Sprint(r.Run.PeakInFlight), r.Run.PeakInFlight <= int64(r.Run.Contract))
	add("downstream 429s", "0", fmt.Sprint(r.Run.Downstream429), r.Run.Downstream429 == 0)
	add("three events happened", "3", fmt.Sprint(len(r.Events)), len(r.Events) == 3)
	add("the documents the quotas told the pods together", fmt.Sprintf("≤ %d usable, every document naming its pods", Usable()),
		fmt.Sprintf("peak %d at %.2fs, %d documents with a share for unnamed pods", r.PeakTold, r.PeakToldAtSeconds, r.UnnamedBase),
		r.PeakTold <= Usable() && r.UnnamedBase == 0)
	for _, e := range r.Events {
		for _, p := range e.Plans {
			got := "none before the run ended"
			if p.Seen {
				got = fmt.Sprintf("%.2fs later, revision %d", p.AfterSeconds, p.Revision)
			}
			if e.Name != eventNameDeleted {
				add(fmt.Sprintf("after %s (%.1fs): %s published a new document", e.Name, e.AtSeconds, p.Quota),
					fmt.Sprintf("within %v", EventPlanBound), got, p.Seen && p.AfterSeconds <= EventPlanBound.Seconds())
				continue
			}
			// The deletion alone reconciles the contract: the record is
			// rebuilt and the documents published again before the next
			// event can be the reason.
			add(fmt.Sprintf("after %s (%.1fs), before the next event %.1fs later: %s published a new document", e.Name, e.AtSeconds, e.NextSeconds, p.Quota),
				fmt.Sprintf("within %v", EventPlanBound), got, p.BeforeNext && p.AfterSeconds <= EventPlanBound.Seconds())
			add(fmt.Sprintf("after %s: %s's first new document restarts above the revisions published before", e.Name, p.Quota),
				fmt.Sprintf("> %d", r.RevisionBeforeDeletion), got, p.Seen && p.Revision > r.RevisionBeforeDeletion)
		}
	}
	add("the contract's status.division at the end", "present", fmt.Sprintf("epoch %q", r.RecordEpoch), r.RecordEpoch != "")
	want := EventsFinalParts()
	for _, q := range slices.Sorted(maps.Keys(want)) {
		got, ok := r.FinalParts[q]
		add(q+"'s part in the contract's last status", fmt.Sprint(want[q]), fmt.Sprintf("%d (listed: %t)", got, ok), got == want[q] && (ok || want[q] == 0))
	}
	add("the turned-away caller's last document and its running pods' gates", "0 and 0",
		fmt.Sprintf("%d and %d", r.TurnedAwayLastPlan, r.TurnedAwayPermits), r.TurnedAwayLastPlan == 0 && r.TurnedAwayPermits == 0)
	add("the search gateway's Ready pods' first gate and its second quota's last document", fmt.Sprintf("%d and %d", want[searchKey(QuotaName)], want[searchKey(SecondQuotaName)]),
		fmt.Sprintf("%d and %d", r.SearchReadyPermits, r.SecondQuotaLastPlan),
		int32(r.SearchReadyPermits) == want[searchKey(QuotaName)] && int32(r.SecondQuotaLastPlan) == want[searchKey(SecondQuotaName)])
	return gs
}

// searchKey returns namespace/quota for a quota of the scenario's search
// gateway.
func searchKey(quota string) string { return SharedContractEvents().Callers[0].Namespace + "/" + quota }

// WriteJSON writes the report to path, creating its directory.
func (r *ContractEventsReport) WriteJSON(path string) error { return report.WriteJSON(path, r) }
