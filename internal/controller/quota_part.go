package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

// quotaPart is one quota's part of a division, as a reconcile gathers,
// publishes and reports it: the quota's own division has one, a shared
// contract one for every quota that names it. The same code publishes a
// quota's document whoever owns its division.
type quotaPart struct {
	quota *v1alpha1.DownstreamQuota
	facts facts
	// plan is the quota's plan; nil when none could be computed or the
	// quota has no part (it departs: its pods are told 0).
	plan *quota.Sizing
	// downstream is what the document names.
	downstream string
	// own names the ConfigMap the quota publishes to; "" when the quota
	// has none to publish to (its workload is gone): then its document
	// goes only to the ConfigMaps that hold its gate already.
	own string
	// ownCM is own as the cache has it; nil when it has none.
	ownCM *corev1.ConfigMap
	// holding are the operator ConfigMaps of the quota's namespace that
	// hold its gate, own among them when it does.
	holding []*corev1.ConfigMap
	caller  *caller
	status  *v1alpha1.DownstreamQuotaStatus
	in      readiness

	// Set by prepare: the caller's part of the step, the shares the
	// document was sized for (with a plan), the document, the ConfigMaps
	// it goes to and whether the publication can go ahead.
	step    callerStep
	shares  quota.Shares
	doc     *plan.Document
	data    []byte
	targets []publishTarget
	// behind is set when a ConfigMap holds a newer revision of the
	// division's epoch than the step's: the step came from a stale record.
	behind bool
	// statusPending is set when the status was written ahead with the
	// division's record only, to be written whole after the publication.
	statusPending bool
}

// publishTarget is a ConfigMap a quota's document goes to, with the
// workload it is labelled for.
type publishTarget struct {
	cm       *corev1.ConfigMap
	workload string
}

// gather reads the ConfigMaps the quota's pods may read its gate from, and
// what they say: the revisions of epoch they hold, and what their documents
// (and record, a quota's status.division of another epoch) give each pod.
// recorded is the revision of the division's record of epoch; 0 when there
// is none.
func (p *Publisher) gather(ctx context.Context, part *quotaPart, epoch string, recorded int64, other *v1alpha1.DivisionStatus) error {
	q := part.quota
	var err error
	if part.holding, err = p.holding(ctx, q.Namespace, q.Name); err != nil {
		return err
	}
	if part.holding, err = p.catchUp(ctx, part.holding, q.Name, epoch, recorded); err != nil {
		return err
	}
	if part.own != "" {
		if i := slices.IndexFunc(part.holding, func(cm *corev1.ConfigMap) bool { return cm.Name == part.own }); i >= 0 {
			part.ownCM = part.holding[i]
		}
	}
	c := part.caller
	published := int64(-1)
	var current *plan.Document
	for _, cm := range part.holding {
		d, ok := documentIn(cm, q.Name)
		rev := int64(0)
		if ok {
			c.docs = append(c.docs, d)
			c.learnDocument(d, epoch)
			if d.Epoch == epoch {
				rev = d.Revision
			}
			// What the pods read now: the document of the quota's own
			// ConfigMap, or else the newest.
			if cm.Name == part.own || current == nil || (current.Revision < d.Revision && !part.ownHolds()) {
				current = &d
			}
		}
		if published < 0 || rev < published {
			published = rev
		}
	}
	if part.own != "" && part.ownCM == nil {
		published = 0 // its pods read a ConfigMap that holds nothing of the gate yet
	}
	c.published = max(published, 0)
	if current != nil {
		names := make([]string, 0, len(c.members))
		for _, m := range c.members {
			names = append(names, m.name)
		}
		c.readDocument(*current, names)
		if current.Epoch != epoch {
			// Its pods read another division's document: what that
			// division's record says they may hold counts too.
			c.elsewhere = true
			c.learnRecord(other, epoch)
		}
	}
	return nil
}

// recordedRevision returns the revision of the record d when it is of
// epoch, else 0.
func recordedRevision(d *v1alpha1.DivisionStatus, epoch string) int64 {
	if d == nil || d.Epoch != epoch {
		return 0
	}
	return d.Revision
}

// catchUp returns holding with every ConfigMap whose cached document of
// gate is behind the division's record, revision recorded of epoch, read
// again from the API server; one that no longer holds the gate there is
// left out. The record is written before the document it records is
// published, so the cache may not have this process's last publication yet
// when the next reconcile reads it (the status write's event came first).
// The pods read the API server's copy: taking the cached one for what they
// read would credit a pod the record does not know with what a replaced
// document gave its name — a StatefulSet's pod created again under its
// name would be counted at the share its namesake released, which the
// record gave to others already. A copy the API server still has (the
// publication failed, or an older document was written back) is what the
// pods read, and is counted.
func (p *Publisher) catchUp(ctx context.Context, holding []*corev1.ConfigMap, gate, epoch string, recorded int64) ([]*corev1.ConfigMap, error) {
	if recorded <= 0 {
		return holding, nil
	}
	out := holding[:0]
	for _, cm := range holding {
		if d, ok := documentIn(cm, gate); !ok || (d.Epoch == epoch && d.Revision >= recorded) {
			out = append(out, cm)
			continue
		}
		live := &corev1.ConfigMap{}
		err := p.apiReader.Get(ctx, client.ObjectKeyFromObject(cm), live)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("controller: get configmap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		if _, ok := live.Data[plan.KeyFor(gate)]; ok {
			out = append(out, live)
		}
	}
	return out, nil
}

// ownHolds reports whether the quota's own ConfigMap holds its gate.
func (part *quotaPart) ownHolds() bool { return part.ownCM != nil }

// prepare makes the quota's document from its part of the step and
// decides where it goes, and fills the quota's status in as it stands once
// the document is published: the division, the ConfigMap, the rollout and
// the readiness.
func (p *Publisher) prepare(ctx context.Context, part *quotaPart, cs callerStep) error {
	q := part.quota
	part.step = cs
	part.status.Division, part.status.PodPermits = cs.status, cs.podPermits()
	part.in.handover = &part.step
	if part.plan != nil {
		part.shares = part.caller.shares(cs)
		d := part.plan.Document(q.Name, part.downstream, q.Generation, part.shares)
		part.doc = &d
	} else if d, ok := part.zeroDocument(cs); ok {
		part.doc = &d
	}
	if part.doc == nil {
		return nil
	}
	data, err := plan.Marshal(*part.doc)
	if err != nil {
		part.in.invalid = err
		part.doc = nil
		return nil
	}
	part.data = data

	if part.own != "" {
		cm, conflict, err := p.target(ctx, q, part.own)
		if err != nil {
			return err
		}
		if conflict != "" {
			part.in.conflict = conflict
		} else {
			part.targets = append(part.targets, publishTarget{cm: cm, workload: q.Spec.WorkloadRef.Name})
		}
	}
	for _, cm := range part.holding {
		// The other ConfigMaps holding the gate are read by pods the
		// record still counts (of a workload the quota named before):
		// they are told their smaller shares there too, until they let
		// go; then the gate is withdrawn from them.
		if cm.Name != part.own && (cs.departing || part.own == "") && notOurs(cm, cm.Labels[v1alpha1.WorkloadLabel]) == "" {
			part.targets = append(part.targets, publishTarget{cm: cm, workload: cm.Labels[v1alpha1.WorkloadLabel]})
		}
	}
	least, where := maxConfigMapBytes, part.own
	for _, t := range part.targets {
		if d, ok := documentIn(t.cm, q.Name); ok && d.Epoch == part.doc.Epoch && d.Revision > part.doc.Revision {
			part.behind = true
		}
		if have := room(t.cm, q.Name); have < least {
			least, where = have, t.cm.Name
		}
	}
	if len(part.data) > least {
		// Many pods: the compact document names each pod once, without
		// its share. Runtimes older than version 3 keep their last plan.
		d := *part.doc
		d.Version = plan.CompactVersion
		d.Hash = plan.Hash(d)
		if data, err := plan.Marshal(d); err == nil {
			part.doc, part.data = &d, data
		}
	}
	if len(part.data) > least {
		part.in.tooLarge = fmt.Sprintf("the document for %d pods takes %d bytes, and ConfigMap %s has room for %d (the API server's limit is %d bytes of data)",
			len(part.doc.Pods), len(part.data), where, max(least, 0), maxConfigMapBytes)
	}
	if part.in.tooLarge != "" || part.in.conflict != "" {
		part.targets = nil
	}
	if part.own == "" || part.in.conflict != "" || part.in.tooLarge != "" {
		if part.status.ConfigMap != nil && part.status.ConfigMap.Name == part.own && part.in.conflict != "" {
			part.status.ConfigMap = nil
		}
		part.in.published = part.status.ConfigMap
		return nil
	}
	part.status.ConfigMap = &v1alpha1.PublishedConfigMap{Name: part.own, Key: plan.KeyFor(q.Name), Hash: part.doc.Hash}
	part.in.published = part.status.ConfigMap
	part.status.Rollout = rolloutStatus(part.facts.pods, q.Name, plan.AckFor(*part.doc))
	part.in.applied = countApplied(part.facts.pods, q.Name, plan.AckFor(*part.doc))
	part.status.PodsApplied = part.in.applied.text()
	return nil
}

// firstPublication reports whether the quota's own ConfigMap is to be
// published to and holds no document of its gate yet.
func (part *quotaPart) firstPublication() bool {
	for _, t := range part.targets {
		if t.cm.Name == part.own {
			_, ok := documentIn(t.cm, part.quota.Name)
			return !ok
		}
	}
	return false
}

// zeroDocument returns the document that tells the pods of a quota without
// a part that they hold nothing, from the newest document its ConfigMaps
// hold, and false when they hold none: its pods were never told anything.
func (part *quotaPart) zeroDocument(cs callerStep) (plan.Document, bool) {
	var last *plan.Document
	for _, cm := range part.holding {
		if d, ok := documentIn(cm, part.quota.Name); ok && (last == nil || d.Revision > last.Revision) {
			last = &d
		}
	}
	if last == nil {
		return plan.Document{}, false
	}
	d := last.WithShare(plan.PodShare{})
	d.Version, d.Generation = plan.CurrentVersion, part.quota.Generation
	d.Epoch, d.Revision, d.Pods = cs.status.Epoch, cs.status.Revision, nil
	d.UnacknowledgedDelaySeconds = cs.unacknowledged.Seconds()
	d.Hash = plan.Hash(d)
	return d, true
}

// publishPart puts the quota's document in every ConfigMap it goes to,
// and, once the record counts no pod that reads another ConfigMap holding
// the gate, withdraws the gate from those.
func (p *Publisher) publishPart(ctx context.Context, part *quotaPart) error {
	if part.doc == nil || part.behind {
		return nil
	}
	for _, t := range part.targets {
		if err := p.publish(ctx, part.quota, t.cm, t.workload, part.doc.Hash, part.data); err != nil {
			return err
		}
	}
	if part.own == "" || part.step.departing || len(part.targets) == 0 {
		return nil
	}
	// The gate is in place in its ConfigMap; only now may it leave any
	// other, so that the pods are never without it.
	return p.withdraw(ctx, part.quota.Namespace, part.quota.Name, part.own)
}
