package reload

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// entry is one key as a source read it: its content, or why it could not be
// read. Entries compare with ==, which is how unchanged content is skipped.
type entry struct {
	data    string
	readErr string
}

// tracker is the validation and bookkeeping both sources share: it turns
// successive snapshots of a source (key → entry) into updates, keeping the
// last good plan of each gate.
type tracker struct {
	log     logr.Logger
	metrics *reloadMetrics

	mu sync.Mutex
	// seen is the entry last read for every key present in the source, good
	// or bad; an equal entry is skipped without parsing or logging.
	seen map[string]entry
	// plans is the last good plan of every gate ever loaded.
	plans map[string]plan.Document
	// revisions holds, per gate, the newest revision put in force of each
	// of the last maxEpochs epochs, oldest epoch first.
	revisions map[string][]epochRevision
	// orphaned holds the gates of plans whose key is gone from the source.
	orphaned map[string]bool
	// rejected holds the gates whose present document was rejected.
	rejected map[string]bool
	// sourceErr is the text of the last whole-source failure, logged once.
	sourceErr string
}

func newTracker(log logr.Logger, m *reloadMetrics) *tracker {
	return &tracker{
		log:       log,
		metrics:   m,
		seen:      map[string]entry{},
		plans:     map[string]plan.Document{},
		revisions: map[string][]epochRevision{},
		orphaned:  map[string]bool{},
		rejected:  map[string]bool{},
	}
}

// apply takes a full snapshot of the source and returns the update it makes,
// with ok false when nothing a subscriber sees has changed. Rejected
// documents are counted, logged once per distinct content, and returned.
func (t *tracker) apply(snapshot map[string]entry) (u Update, ok bool, rejected []error) {
	t.mu.Lock()
	defer t.mu.Unlock()

	if t.sourceErr != "" {
		t.log.Info("Config source is readable again")
		t.sourceErr = ""
	}

	present := map[string]bool{}
	var changed []string
	orphansChanged := false
	for _, key := range slices.Sorted(maps.Keys(snapshot)) {
		gate, isPlan := plan.GateFromKey(key)
		if !isPlan {
			if strings.HasSuffix(key, plan.KeySuffix) {
				// Looks like a plan but cannot name a gate: say so, once.
				e := snapshot[key]
				if t.seen[key] != e {
					t.seen[key] = e
					err := fmt.Errorf("reload: key %q does not name a gate: the part before %q must be a DNS-1123 subdomain", key, plan.KeySuffix)
					t.rejectLocked(err, key, "")
					rejected = append(rejected, err)
				}
			}
			continue
		}
		present[gate] = true
		if t.orphaned[gate] {
			delete(t.orphaned, gate)
			t.metrics.orphaned.WithLabelValues(gate).Set(0)
			t.log.Info("Gate is back in the config source", "gate", gate)
			orphansChanged = true
		}

		e := snapshot[key]
		if prev, seen := t.seen[key]; seen && prev == e {
			continue
		}
		t.seen[key] = e

		d, err := parseEntry(key, gate, e)
		if err == nil {
			err = t.olderLocked(key, d)
		}
		if err != nil {
			t.rejectLocked(err, key, gate)
			t.setRejectedLocked(gate, true)
			rejected = append(rejected, err)
			continue
		}
		t.setRejectedLocked(gate, false)
		if old, had := t.plans[gate]; had && plan.Equal(old, d) {
			continue
		}
		t.commitLocked(d)
		changed = append(changed, gate)
	}

	for key := range t.seen {
		if _, ok := snapshot[key]; !ok {
			delete(t.seen, key)
		}
	}
	// A rejected document that is gone is no longer the gate's latest:
	// an orphaned gate says so in its own gauge.
	for gate := range t.rejected {
		if !present[gate] {
			t.setRejectedLocked(gate, false)
		}
	}
	for _, gate := range slices.Sorted(maps.Keys(t.plans)) {
		if present[gate] || t.orphaned[gate] {
			continue
		}
		t.orphaned[gate] = true
		t.metrics.orphaned.WithLabelValues(gate).Set(1)
		t.log.Info("Gate's document disappeared from the config source; keeping its last plan until restart",
			"gate", gate, "hash", t.plans[gate].Hash)
		orphansChanged = true
	}

	if len(changed) == 0 && !orphansChanged {
		return Update{}, false, rejected
	}
	u = t.updateLocked()
	u.Changed = changed
	return u, true, rejected
}

// maxEpochs bounds the epochs whose newest revision a gate remembers: an
// epoch comes back when a quota moves from its own division to a shared
// contract and back, a handful of times in a gate's life.
const maxEpochs = 8

// epochRevision is the newest revision of one epoch put in force.
type epochRevision struct {
	epoch    string
	revision int64
}

// olderLocked returns an error when d is not newer than a revision of its
// epoch already put in force for its gate (but for the plan in force
// itself): a stale copy of the ConfigMap put back (a deposed operator's
// late write, a backup, a GitOps re-apply), or a document of an epoch the
// gate has since left delivered late, must not roll the gate back to a
// share the operator already counts as given up. The operator never
// publishes a revision twice in an epoch, and starts an epoch it comes
// back to above the revisions it published before.
func (t *tracker) olderLocked(key string, d plan.Document) error {
	if old, had := t.plans[d.Gate]; had && old.Epoch == d.Epoch && old.Revision == d.Revision && sameContent(old, d) {
		return nil
	}
	for _, er := range t.revisions[d.Gate] {
		if er.epoch == d.Epoch && d.Revision <= er.revision {
			return fmt.Errorf("reload: %s: revision %d of epoch %s is not newer than revision %d put in force; keeping the plan in force", key, d.Revision, d.Epoch, er.revision)
		}
	}
	return nil
}

// noteLocked remembers that revision d of its epoch is in force.
func (t *tracker) noteLocked(d plan.Document) {
	list := slices.DeleteFunc(t.revisions[d.Gate], func(er epochRevision) bool { return er.epoch == d.Epoch })
	list = append(list, epochRevision{epoch: d.Epoch, revision: d.Revision})
	if len(list) > maxEpochs {
		list = list[len(list)-maxEpochs:]
	}
	t.revisions[d.Gate] = list
}

// sameContent reports whether a and b are the same plan, whatever the
// quota generation each was written for.
func sameContent(a, b plan.Document) bool {
	a.Generation = b.Generation
	return plan.Equal(a, b)
}

// sourceFailed records that the whole source could not be read; every gate
// keeps its plan. Each distinct failure is counted and logged once.
func (t *tracker) sourceFailed(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err.Error() == t.sourceErr {
		return
	}
	t.sourceErr = err.Error()
	t.metrics.reloads.WithLabelValues(ResultError).Inc()
	t.log.Error(err, "Could not read the config source; keeping the last good plans")
}

// current returns an update holding every plan, all listed as changed: what
// a subscriber that has seen nothing yet needs.
func (t *tracker) current() Update {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.updateLocked()
	u.Changed = slices.Sorted(maps.Keys(t.plans))
	return u
}

// plansCopy returns the plans in force.
func (t *tracker) plansCopy() map[string]plan.Document {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.plans)
}

func (t *tracker) updateLocked() Update {
	var orphaned []string
	if len(t.orphaned) > 0 {
		orphaned = slices.Sorted(maps.Keys(t.orphaned))
	}
	return Update{Plans: maps.Clone(t.plans), Orphaned: orphaned}
}

func (t *tracker) commitLocked(d plan.Document) {
	old, had := t.plans[d.Gate]
	if had && old.Hash != d.Hash {
		t.metrics.planInfo.DeleteLabelValues(d.Gate, old.Hash)
	}
	t.plans[d.Gate] = d
	t.noteLocked(d)
	t.metrics.planInfo.WithLabelValues(d.Gate, d.Hash).Set(1)
	t.metrics.orphaned.WithLabelValues(d.Gate).Set(0)
	t.metrics.reloads.WithLabelValues(ResultSuccess).Inc()
	// The document divides the gate over the pods it names; its own
	// figures are the base share, what a pod it does not name enforces
	// (none, once the operator names every Ready pod). So they are logged
	// as such: the pod's own share is what the Runtime logs as "Applied
	// plan", and a "permits" here beside it would read as a contradiction.
	t.log.Info("Loaded plan", "gate", d.Gate, "hash", d.Hash, "generation", d.Generation,
		"epoch", d.Epoch, "revision", d.Revision, "podsNamed", len(d.Pods), "basePermits", d.Permits,
		"baseRatePerSecond", d.RatePerSecond, "baseBurst", d.Burst, "baseQueueCapacity", d.QueueCapacity,
		"maxQueueWaitSeconds", d.MaxQueueWaitSeconds, "baseWorkers", d.Workers)
}

// setRejectedLocked records whether the present document of gate is
// rejected, in the gauge backpressure_config_gate_rejected.
func (t *tracker) setRejectedLocked(gate string, rejected bool) {
	if rejected {
		t.rejected[gate] = true
		t.metrics.rejected.WithLabelValues(gate).Set(1)
		return
	}
	delete(t.rejected, gate)
	t.metrics.rejected.WithLabelValues(gate).Set(0)
}

func (t *tracker) rejectLocked(err error, key, gate string) {
	t.metrics.reloads.WithLabelValues(ResultError).Inc()
	kv := []any{"key", key}
	if last, ok := t.plans[gate]; ok {
		kv = append(kv, "gate", gate, "keptHash", last.Hash)
	}
	t.log.Error(err, "Rejected plan document; the gate keeps its last good plan", kv...)
}

// parseEntry validates one key's entry as the plan of gate.
func parseEntry(key, gate string, e entry) (plan.Document, error) {
	if e.readErr != "" {
		return plan.Document{}, fmt.Errorf("reload: read %s: %s", key, e.readErr)
	}
	d, err := plan.Parse([]byte(e.data))
	if err != nil {
		return plan.Document{}, fmt.Errorf("reload: %s: %w", key, err)
	}
	if d.Gate != gate {
		return plan.Document{}, fmt.Errorf("reload: %s: holds the plan of gate %q, want %q", key, d.Gate, gate)
	}
	return d, nil
}

// ErrNoPlan is matched (errors.Is) by the error of a source whose first read
// found no valid plan document.
var ErrNoPlan = errors.New("reload: no valid plan document")

// initialError explains why a first read yielded no plan.
func initialError(source string, rejected []error) error {
	if len(rejected) == 0 {
		return fmt.Errorf("%w in %s (want keys named <gate>%s)", ErrNoPlan, source, plan.KeySuffix)
	}
	return fmt.Errorf("%w in %s: %w", ErrNoPlan, source, errors.Join(rejected...))
}
