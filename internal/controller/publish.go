package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/internal/controller/indexer"
	"github.com/backpressure-dev/backpressure-operator/internal/quota"
)

const (
	// ManagedByLabel marks the ConfigMaps the operator owns. The manager's
	// cache holds only ConfigMaps labelled ManagedByLabel=ManagedByValue.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value on the operator's ConfigMaps.
	ManagedByValue = "backpressure-operator"
	// FieldOwner is the field manager of the operator's writes that belong
	// to no single quota: claiming a ConfigMap's name, withdrawing a gate.
	// Each quota's gate is applied by gateFieldOwner(quota).
	FieldOwner = "backpressure-operator"

	// maxFieldManager is the API server's limit on a field manager's length.
	maxFieldManager = 128
)

// gateFieldOwner is the field manager that applies quota's gate: one per
// quota, so that each owns its own data key of a shared ConfigMap. A name
// too long for the limit is cut and suffixed with a hash of the whole, so
// it stays unique.
func gateFieldOwner(quota string) string {
	owner := FieldOwner + "/" + quota
	if len(owner) <= maxFieldManager {
		return owner
	}
	sum := sha256.Sum256([]byte(quota))
	suffix := "-" + hex.EncodeToString(sum[:8])
	return owner[:maxFieldManager-len(suffix)] + suffix
}

// configMapLabels are the labels of a workload's ConfigMap.
func configMapLabels(workload string) map[string]string {
	return map[string]string{ManagedByLabel: ManagedByValue, v1alpha1.WorkloadLabel: workload}
}

// notOurs says why cm may not hold workload's gates, or "" when it may.
func notOurs(cm *corev1.ConfigMap, workload string) string {
	if cm.Labels[ManagedByLabel] != ManagedByValue {
		return fmt.Sprintf("ConfigMap %s exists and is not managed by %s (it lacks the label %s=%s)",
			cm.Name, ManagedByValue, ManagedByLabel, ManagedByValue)
	}
	if w := cm.Labels[v1alpha1.WorkloadLabel]; w != workload {
		return fmt.Sprintf("ConfigMap %s holds the gates of workload %q, not of %q", cm.Name, w, workload)
	}
	return ""
}

// gatePublished reports whether cm already holds q's gate with content hash
// and names q as an owner, so that applying it would change nothing.
func gatePublished(cm *corev1.ConfigMap, q *v1alpha1.DownstreamQuota, hash string) bool {
	return currentDocument(cm.Data[plan.KeyFor(q.Name)], hash) &&
		slices.ContainsFunc(cm.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == q.UID })
}

// maxConfigMapBytes is the API server's limit on a ConfigMap's data: the
// keys and values of data and binaryData together.
const maxConfigMapBytes = 1 << 20

// target returns the ConfigMap of q's namespace named name, which is to
// hold q's gate, as the cache has it, or as claim leaves it when the cache
// has none. When the ConfigMap is not the operator's it returns why, as the
// conflict.
func (p *Publisher) target(ctx context.Context, q *v1alpha1.DownstreamQuota, name string) (cm *corev1.ConfigMap, conflict string, err error) {
	workload := q.Spec.WorkloadRef.Name
	key := client.ObjectKey{Namespace: q.Namespace, Name: name}
	cm = &corev1.ConfigMap{}
	err = p.client.Get(ctx, key, cm)
	if apierrors.IsNotFound(err) {
		cm, err = p.claim(ctx, key, workload)
	}
	if err != nil {
		return nil, "", fmt.Errorf("controller: get configmap %s: %w", key, err)
	}
	return cm, notOurs(cm, workload), nil
}

// holding returns the operator ConfigMaps of namespace that hold quota's
// gate, by name, as the cache has them.
func (p *Publisher) holding(ctx context.Context, namespace, quota string) ([]*corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	if err := p.client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{indexer.ConfigMapGateKey: quota}); err != nil {
		return nil, fmt.Errorf("controller: list configmaps holding gate %s/%s: %w", namespace, quota, err)
	}
	out := make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	slices.SortFunc(out, func(a, b *corev1.ConfigMap) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// documentIn returns the document of gate that cm holds, and false when it
// holds none that parses.
func documentIn(cm *corev1.ConfigMap, gate string) (plan.Document, bool) {
	data, ok := cm.Data[plan.KeyFor(gate)]
	if !ok {
		return plan.Document{}, false
	}
	d, err := plan.Parse([]byte(data))
	return d, err == nil && d.Gate == gate
}

// room is how many bytes the document of gate may take in cm: the
// ConfigMap limit less the other keys' and values' sizes and its own key.
func room(cm *corev1.ConfigMap, gate string) int {
	key := plan.KeyFor(gate)
	n := maxConfigMapBytes - len(key)
	for k, v := range cm.Data {
		if k != key {
			n -= len(k) + len(v)
		}
	}
	for k, v := range cm.BinaryData {
		n -= len(k) + len(v)
	}
	return n
}

// publish puts q's gate, the encoded document data of content hash, into
// cm, when cm does not hold it already. workload is the workload cm is
// labelled for.
func (p *Publisher) publish(ctx context.Context, q *v1alpha1.DownstreamQuota, cm *corev1.ConfigMap, workload, hash string, data []byte) error {
	if gatePublished(cm, q, hash) {
		return nil
	}
	name, key := cm.Name, client.ObjectKeyFromObject(cm)
	owner := metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).WithKind(quota.Kind).
		WithName(q.Name).WithUID(q.UID)
	gate := corev1ac.ConfigMap(name, q.Namespace).
		WithLabels(configMapLabels(workload)).
		WithOwnerReferences(owner).
		WithData(map[string]string{plan.KeyFor(q.Name): string(data)})
	// Noted before the write, as its watch event may come before its
	// response.
	quota := client.ObjectKeyFromObject(q)
	p.applied.note(quota, name, data)
	// Force: the key is this quota's alone; someone who edited it by hand
	// loses it back.
	if err := p.client.Apply(ctx, gate, client.FieldOwner(gateFieldOwner(q.Name)), client.ForceOwnership); err != nil {
		p.applied.forget(quota)
		return fmt.Errorf("controller: apply gate %s to configmap %s: %w", q.Name, key, err)
	}
	return nil
}

// appliedGates remembers, per quota, the ConfigMap and the content of the
// gate last applied to it. It is safe for concurrent use; its zero value
// is empty.
type appliedGates struct {
	m sync.Map // types.NamespacedName → appliedGate
}

// appliedGate is one quota's last applied gate: the ConfigMap's name and a
// digest of the document.
type appliedGate struct {
	configMap string
	digest    [sha256.Size]byte
}

func (a *appliedGates) note(quota types.NamespacedName, configMap string, data []byte) {
	a.m.Store(quota, appliedGate{configMap: configMap, digest: sha256.Sum256(data)})
}

func (a *appliedGates) forget(quota types.NamespacedName) { a.m.Delete(quota) }

// ownGateWrite reports whether cm holds, as the gate of the quota named
// gate, exactly what this reconciler last applied there, with that quota's
// owner reference: a change
// the reconciler made itself and need not look at again. Anything else
// (a hand edit of the key, a removed owner reference, a write after a
// restart) is not.
func (a *appliedGates) ownGateWrite(cm *corev1.ConfigMap, gate string) bool {
	v, ok := a.m.Load(types.NamespacedName{Namespace: cm.Namespace, Name: gate})
	if !ok {
		return false
	}
	last := v.(appliedGate)
	data, ok := cm.Data[plan.KeyFor(gate)]
	return ok && last.configMap == cm.Name && sha256.Sum256([]byte(data)) == last.digest &&
		slices.ContainsFunc(cm.OwnerReferences, func(ref metav1.OwnerReference) bool {
			return quota.IsOwner(ref) && ref.Name == gate
		})
}

// claim is called when the cache has no ConfigMap named key: there is none,
// or it lacks the operator's label, or the cache has not seen it yet. It
// returns the ConfigMap the API server has, creating an empty one with the
// operator's labels when there is none. Creating, rather than applying,
// fails instead of adopting a ConfigMap someone created since the read.
func (p *Publisher) claim(ctx context.Context, key client.ObjectKey, workload string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := p.apiReader.Get(ctx, key, cm); !apierrors.IsNotFound(err) {
		return cm, err
	}
	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: configMapLabels(workload)}}
	err := p.client.Create(ctx, cm, client.FieldOwner(FieldOwner))
	if apierrors.IsAlreadyExists(err) {
		// Another quota of the workload, or someone else, was first.
		cm = &corev1.ConfigMap{}
		err = p.apiReader.Get(ctx, key, cm)
	}
	return cm, err
}

// withdraw takes the gate of quota out of every operator ConfigMap of
// namespace that holds it, except the one named keep, and deletes a
// ConfigMap it leaves without data.
func (p *Publisher) withdraw(ctx context.Context, namespace, quota, keep string) error {
	list, err := p.holding(ctx, namespace, quota)
	if err != nil {
		return err
	}
	for _, cm := range list {
		if name := cm.Name; name != keep {
			if err := p.removeGate(ctx, client.ObjectKey{Namespace: namespace, Name: name}, quota); err != nil {
				return fmt.Errorf("controller: withdraw gate %s from configmap %s: %w", quota, name, err)
			}
		}
	}
	return nil
}

// removeGate deletes quota's key and owner reference from the ConfigMap
// named key, and then the ConfigMap if no data is left. It reads from the
// API server and writes under the resourceVersion it read, retrying on a
// conflict, so it never deletes a ConfigMap another quota has just written
// to. A merge patch rather than an empty apply removes the key whoever last
// wrote it.
func (p *Publisher) removeGate(ctx context.Context, key client.ObjectKey, quota string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		if err := p.apiReader.Get(ctx, key, cm); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cm.Labels[ManagedByLabel] != ManagedByValue {
			return nil // no longer the operator's
		}
		if without, changed := withoutGate(cm, quota); changed {
			if err := p.client.Patch(ctx, without, client.MergeFromWithOptions(cm, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
				return client.IgnoreNotFound(err)
			}
			cm = without
		}
		if len(cm.Data) > 0 || len(cm.BinaryData) > 0 {
			return nil
		}
		err := p.client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		return client.IgnoreNotFound(err)
	})
}

// withoutGate returns a copy of cm without the key of the quota named gate
// and its DownstreamQuota owner references, and whether that changed anything.
func withoutGate(cm *corev1.ConfigMap, gate string) (*corev1.ConfigMap, bool) {
	out := cm.DeepCopy()
	key := plan.KeyFor(gate)
	_, had := out.Data[key]
	delete(out.Data, key)
	refs := len(out.OwnerReferences)
	out.OwnerReferences = slices.DeleteFunc(out.OwnerReferences, func(ref metav1.OwnerReference) bool {
		return quota.IsOwner(ref) && ref.Name == gate
	})
	return out, had || len(out.OwnerReferences) != refs
}
