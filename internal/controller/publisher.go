package controller

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/backpressure-dev/backpressure-operator/internal/handover"
)

// Publisher is what the DownstreamQuota and DownstreamContract reconcilers
// share: the client and the clock they divide with, the event recorder, the
// write-ahead record of a division (status.division, written before any
// pod is told), the publication and withdrawal of a quota's document in its
// ConfigMap, and the status writes with their conditions. Each reconciler
// holds the same Publisher; a quota's document is published by the same
// code whether the quota's own division or a shared contract's owns it.
// Build it with NewPublisher; it is safe for concurrent use.
type Publisher struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
	// clockID names this process's clock in the records it stamps.
	clockID         string
	conflictRecheck time.Duration
	// applied is what this process last applied as each quota's gate, so
	// that the ConfigMap's update coming back through the watch does not
	// reconcile the quota, or its contract, once more for nothing; see
	// ownGateWrite.
	applied appliedGates
	// releases are the releases seen on pods being deleted, for the steps
	// that find them gone.
	releases releases
	// demand is where quotas whose shares follow demand read it.
	demand demandReads
}

// Option configures a Publisher.
type Option func(*Publisher)

// WithClock sets the clock that stamps condition transitions and times the
// handover's delays; the default is the real clock.
func WithClock(c clock.PassiveClock) Option {
	return func(p *Publisher) { p.clock = c }
}

// WithClockID sets the name of the clock in the division records this
// Publisher writes (status.division.clock). The default names this process:
// its host name and start time. Another name in a record means another
// process's clock stamped it, and every pending delay starts again.
func WithClockID(id string) Option {
	return func(p *Publisher) { p.clockID = id }
}

// WithConflictRecheck sets how often a quota in ConfigMapConflict checks
// again; the default is DefaultConflictRecheck.
func WithConflictRecheck(d time.Duration) Option {
	return func(p *Publisher) { p.conflictRecheck = d }
}

// NewPublisher returns a Publisher that reads through c (the manager's
// cache-backed client, with the indexes of package indexer), checks
// ConfigMaps and quotas outside the cache through apiReader, and records
// events with recorder.
func NewPublisher(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts ...Option) *Publisher {
	p := &Publisher{
		client:          c,
		apiReader:       apiReader,
		recorder:        recorder,
		clock:           clock.RealClock{},
		clockID:         processClockID(),
		conflictRecheck: DefaultConflictRecheck,
		demand: demandReads{interval: DefaultDemandInterval,
			wakeQuotas: make(chan event.GenericEvent, demandWakeBuffer), wakeContracts: make(chan event.GenericEvent, demandWakeBuffer)},
	}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

// processClockID names this process: its host name (the pod's name) and
// the time it started.
func processClockID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, time.Now().UnixNano())
}

// addDeparting adds to d, as departed members of their callers, the pods
// that only the record still counts: each is looked up by name, and counts
// as gone when its object is; a finished pod holds nothing and is left out.
// A caller that left the division (its quota is gone, names another owner,
// or is turned away) is added when the division does not have it.
func (p *Publisher) addDeparting(ctx context.Context, d *divisionInput, records map[string]handover.Record) error {
	for _, key := range departingKeys(d, records) {
		var c *caller
		name := key
		if !d.shared {
			c = d.callers[0]
		} else {
			ns, quota, pod := splitKey(key)
			name = pod
			prefix := callerPrefix(ns, quota)
			if quota == "" {
				prefix = ns + "/"
			}
			for _, have := range d.callers {
				if have.prefix == prefix {
					c = have
				}
			}
			if c == nil {
				c = &caller{namespace: ns, gate: quota, prefix: prefix, unreached: true}
				d.callers = append(d.callers, c)
			}
		}
		pod := &corev1.Pod{}
		var reader client.Reader = p.client
		if records[key].Released {
			// Its share is freed once no document gives its name anything,
			// unless a pod was created again under the name meanwhile: one
			// the cache has not seen yet may have read such a document.
			reader = p.apiReader
		}
		err := reader.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, pod)
		var m member
		switch {
		case apierrors.IsNotFound(err):
			m = member{key: key, name: name, gone: true}
			// Gone after it said it released its share: as released as
			// a pod seen leaving with that acknowledgement.
			if a, ok := p.releases.released(c.namespace, name, c.gate, d.epoch); ok {
				m.leaving, m.ack, m.acked = true, a, true
			}
		case err != nil:
			return fmt.Errorf("controller: get pod %s/%s: %w", c.namespace, name, err)
		case podFinished(pod):
			continue
		default:
			m = memberOf(pod, c.prefix, c.gate, d.epoch)
			m.key, m.serving = key, false
		}
		m.departed = true
		c.members = append(c.members, m)
	}
	return nil
}

// divide runs one handover step of the division d: it resumes the record,
// adds the pods only the record still counts, and steps.
func (p *Publisher) divide(ctx context.Context, d *divisionInput) (handoverStep, error) {
	d.now, d.clock = p.clock.Now(), p.clockID
	res := resume(d)
	if err := p.addDeparting(ctx, d, res.Records); err != nil {
		return handoverStep{}, err
	}
	h := step(d, res)
	h.changed = h.changed || res.Restamped
	return h, nil
}
