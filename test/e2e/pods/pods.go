// Package pods runs the pods of a cluster that has no kubelet, such as the
// local cluster of hack/dev-cluster.sh, as far as the operator can tell:
// it plays the scheduler and the kubelet (package kubelet) for every pod it
// watches, and the application inside each pod is the library alone,
// following the pod's share of its workload's plans and acknowledging it
// as an application built with it does. No process runs per pod and no
// call reaches a downstream: a pod's calls in flight are always 0, so it
// acknowledges a smaller share as soon as it has applied it.
//
// A pod's life: StartDelay after it is first seen (scheduling, image pull,
// container start) it is bound to the node and Running; its container then
// opens the library on the ConfigMap of every DownstreamQuota that names
// its workload, and the pod turns Ready once the library holds a plan for
// each of them (backpressure.New), as a pod whose readiness waits for its plans
// does. A pod whose workload no quota names turns Ready without the
// library, and opens it once a quota names the workload (a workload and
// its quota applied together create the pods first). When the pod is deleted, it leaves Ready, the library stops and
// hands the pod's share back ("<epoch>/released"), and the pod is deleted
// for good, as the kubelet does once the containers have stopped.
package pods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/kubelet"
)

// DefaultNode is the node the pods are bound to unless Options.Node names
// another.
const DefaultNode = "local-node"

// Options configure Run.
type Options struct {
	// Config is the API server's config.
	Config *rest.Config
	// Namespace is the namespace whose pods are run; empty means every
	// namespace.
	Namespace string
	// Selector picks the pods to run; nil means every pod.
	Selector labels.Selector
	// Node is the node the pods are bound to, registered by Run; empty
	// means DefaultNode.
	Node string
	// StartDelay is the time from a pod's creation being seen to its
	// container starting.
	StartDelay time.Duration
	// Acknowledge turns on the library's acknowledgements (Options.Ack).
	// Without them the operator hands a share a pod gives up to others
	// only after the quota's spec.handover.unacknowledgedDelay.
	Acknowledge bool
	// RetryInterval is how often a pod's container tries again to open the
	// library while its plans are not published; zero means a second.
	RetryInterval time.Duration
	// Log receives what happens to each pod; nil discards it.
	Log *slog.Logger
}

// Run runs the pods until ctx ends. Then every pod it runs leaves Ready and
// its library hands the pod's share back, as when a node shuts down; the
// pods stay, as they would on a node that stopped. It returns an error only
// when it cannot start.
func Run(ctx context.Context, opts Options) error {
	if opts.Node == "" {
		opts.Node = DefaultNode
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Selector == nil {
		opts.Selector = labels.Everything()
	}
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	if err := kubelet.CreateNode(ctx, c, opts.Node); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	p := &player{opts: opts, c: c, cs: cs, pods: map[types.UID]*pod{}}
	informer := coreinformers.NewFilteredPodInformer(cs, opts.Namespace, 0, cache.Indexers{}, func(lo *metav1.ListOptions) {
		lo.LabelSelector = opts.Selector.String()
	})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.observe(ctx, obj, false) },
		UpdateFunc: func(_, obj any) { p.observe(ctx, obj, false) },
		DeleteFunc: func(obj any) { p.observe(ctx, obj, true) },
	}); err != nil {
		return err
	}
	opts.Log.Info("Running pods", "namespace", namespaceOrAll(opts.Namespace), "node", opts.Node, "acknowledge", opts.Acknowledge)
	informer.RunWithContext(ctx)
	p.wg.Wait()
	return nil
}

func namespaceOrAll(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// player is Run's state.
type player struct {
	opts Options
	c    client.Client
	cs   kubernetes.Interface
	wg   sync.WaitGroup

	mu   sync.Mutex
	pods map[types.UID]*pod // every pod being run, by UID
}

// pod is one pod being run.
type pod struct {
	namespace, name string
	uid             types.UID
	deleted         chan struct{} // closed when the pod is being deleted
	once            sync.Once
}

func (p *pod) delete() { p.once.Do(func() { close(p.deleted) }) }

// observe starts running a new pod, and ends a deleted one.
func (p *player) observe(ctx context.Context, obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if run := p.pods[o.UID]; run != nil {
		if deleted || o.DeletionTimestamp != nil {
			run.delete()
		}
		return
	}
	if deleted || o.DeletionTimestamp != nil || ctx.Err() != nil ||
		o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed ||
		(o.Spec.NodeName != "" && o.Spec.NodeName != p.opts.Node) {
		return
	}
	run := &pod{namespace: o.Namespace, name: o.Name, uid: o.UID, deleted: make(chan struct{})}
	p.pods[o.UID] = run
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.run(ctx, o.DeepCopy(), run)
		p.mu.Lock()
		delete(p.pods, run.uid)
		p.mu.Unlock()
	}()
}

// run plays one pod from its creation until its deletion or ctx's end.
func (p *player) run(ctx context.Context, o *corev1.Pod, run *pod) {
	log := p.opts.Log.With("pod", run.namespace+"/"+run.name)
	select {
	case <-time.After(p.opts.StartDelay):
	case <-run.deleted:
		return // deleted before it was scheduled: gone at once
	case <-ctx.Done():
		return
	}
	if o.Spec.NodeName == "" {
		if err := kubelet.Bind(ctx, p.c, o, p.opts.Node); err != nil {
			if !kubelet.Gone(err) && ctx.Err() == nil {
				log.Error("Binding failed", "err", err)
			}
			return
		}
	}
	started := metav1.Now()
	if err := p.setStatus(ctx, run, started, false, log); err != nil {
		return
	}

	// The container: the library on each of the workload's ConfigMaps.
	libs, err := p.openLibrary(ctx, o, run, log)
	if err != nil {
		// Deleted, or ctx ended, before the plans were there.
		p.stop(run, started, nil, log)
		return
	}
	if err := p.setStatus(ctx, run, started, true, log); err != nil {
		p.stop(run, started, libs, log)
		return
	}
	log.Info("Ready")
	if len(libs) == 0 {
		libs = p.followLateQuota(ctx, o, run, log)
	}
	select {
	case <-run.deleted:
	case <-ctx.Done():
	}
	p.stop(run, started, libs, log)
}

// followLateQuota looks again, every RetryInterval while the pod lives,
// for a DownstreamQuota that names the pod's workload, and opens the
// library on its ConfigMaps once one does: `kubectl apply` of a workload
// and its quota together creates the pods before the quota, and an
// application built with the library follows its plan once there is one.
// It returns the libraries opened, none when the pod ends first.
func (p *player) followLateQuota(ctx context.Context, o *corev1.Pod, run *pod, log *slog.Logger) []*library {
	for {
		if err := p.wait(ctx, run); err != nil {
			return nil
		}
		sources, err := p.sources(ctx, o)
		if err != nil || len(sources) == 0 {
			continue // a failed read is tried again, as is no quota
		}
		log.Info("A DownstreamQuota names the pod's workload now: opening the library")
		libs, err := p.openSources(ctx, run, sources, log)
		if err != nil {
			return nil
		}
		return libs
	}
}

// setStatus writes the pod's status, trying again every RetryInterval
// until it is written, and fails only when the pod is deleted or ctx ends
// first: a pod whose Ready status was not written would wait forever.
func (p *player) setStatus(ctx context.Context, run *pod, started metav1.Time, ready bool, log *slog.Logger) error {
	for {
		err := kubelet.SetStatus(ctx, p.c, run.namespace, run.name, run.uid, started, ready)
		if err == nil {
			return nil
		}
		log.Error("Writing the status failed; trying again", "ready", ready, "err", err)
		if err := p.wait(ctx, run); err != nil {
			return err
		}
	}
}

// stop ends a pod: it leaves Ready, its library hands its share back, and
// a deleted pod is then deleted for good. The writes outlive ctx, which
// may be what ended the pod.
func (p *player) stop(run *pod, started metav1.Time, libs []*library, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deleted := false
	select {
	case <-run.deleted:
		deleted = true
	default:
	}
	if !deleted {
		// The node stops: the pod stays, no longer Ready.
		if err := kubelet.SetStatus(ctx, p.c, run.namespace, run.name, run.uid, started, false); err != nil {
			log.Error("Writing the status failed", "err", err)
		}
	}
	for _, l := range libs {
		l.stop()
		if err := l.err(); err != nil {
			log.Error("The library stopped with an error", "configMap", l.configMap, "err", err)
		}
	}
	if deleted {
		if err := kubelet.Delete(ctx, p.c, run.namespace, run.name, run.uid); err != nil {
			log.Error("Deleting the pod failed", "err", err)
			return
		}
		log.Info("Deleted", "released", len(libs) > 0)
	}
}

// library is one Runtime following one ConfigMap for a pod.
type library struct {
	configMap string
	cancel    context.CancelFunc
	done      chan struct{}
	startErr  error // set before done is closed
}

func (l *library) stop() {
	l.cancel()
	<-l.done
}

func (l *library) err() error {
	<-l.done
	return l.startErr
}

// openLibrary opens the library on every ConfigMap the quotas of the pod's
// workload publish to, trying again every RetryInterval until each holds a
// plan for every gate, as a container whose start fails without its plans
// is restarted. It returns no library for a pod whose workload no quota
// names, and an error when the pod is deleted or ctx ends first.
func (p *player) openLibrary(ctx context.Context, o *corev1.Pod, run *pod, log *slog.Logger) ([]*library, error) {
	sources, err := p.sources(ctx, o)
	for err != nil {
		log.Error("Reading the pod's workload and quotas failed; trying again", "err", err)
		if err := p.wait(ctx, run); err != nil {
			return nil, err
		}
		sources, err = p.sources(ctx, o)
	}
	if len(sources) == 0 {
		log.Info("No DownstreamQuota names the pod's workload: Ready without the library until one does")
		return nil, nil
	}
	return p.openSources(ctx, run, sources, log)
}

// openSources opens the library on each of sources; on an error it stops
// those it opened.
func (p *player) openSources(ctx context.Context, run *pod, sources []source, log *slog.Logger) ([]*library, error) {
	var libs []*library
	for _, src := range sources {
		l, err := p.open(ctx, run, src, log)
		if err != nil {
			for _, opened := range libs {
				opened.stop()
			}
			return nil, err
		}
		libs = append(libs, l)
	}
	return libs, nil
}

// source is a ConfigMap and the gates a pod follows in it.
type source struct {
	configMap string
	gates     []string
}

// open opens one Runtime, retrying while its plans are missing.
func (p *player) open(ctx context.Context, run *pod, src source, log *slog.Logger) (*library, error) {
	logger := logr.FromSlogHandler(log.Handler())
	waiting := false
	for {
		libCtx, cancel := context.WithCancel(context.Background())
		opts := backpressure.Options{
			Gates:        src.gates,
			Logger:       logger,
			PodName:      run.name,
			PodNamespace: run.namespace,
		}
		if p.opts.Acknowledge {
			opts.Ack = &backpressure.AckOptions{Client: p.cs}
		}
		rt, err := backpressure.New(libCtx, backpressure.FromConfigMap(p.cs, run.namespace, src.configMap), opts)
		if err == nil {
			l := &library{configMap: src.configMap, cancel: cancel, done: make(chan struct{})}
			go func() {
				defer close(l.done)
				l.startErr = rt.Start(libCtx)
			}()
			return l, nil
		}
		cancel()
		if !waiting {
			log.Info("Waiting for the plans", "configMap", src.configMap, "gates", src.gates, "err", err)
			waiting = true
		}
		if err := p.wait(ctx, run); err != nil {
			return nil, err
		}
	}
}

// wait waits RetryInterval, and fails when the pod is deleted or ctx ends
// first.
func (p *player) wait(ctx context.Context, run *pod) error {
	select {
	case <-time.After(p.opts.RetryInterval):
		return nil
	case <-run.deleted:
		return errors.New("pods: deleted")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sources returns the ConfigMaps, with their gates, of the quotas that name
// the pod's workload.
func (p *player) sources(ctx context.Context, o *corev1.Pod) ([]source, error) {
	kind, name, err := p.workload(ctx, o)
	if err != nil || kind == "" {
		return nil, err
	}
	var quotas v1alpha1.DownstreamQuotaList
	if err := p.c.List(ctx, &quotas, client.InNamespace(o.Namespace)); err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	gates := map[string][]string{}
	for _, q := range quotas.Items {
		if q.Spec.WorkloadRef.Kind != kind || q.Spec.WorkloadRef.Name != name {
			continue
		}
		cm := q.Spec.ConfigMapName
		if cm == "" {
			cm = name + v1alpha1.ConfigMapSuffix
		}
		gates[cm] = append(gates[cm], q.Name)
	}
	var out []source
	for cm, g := range gates {
		slices.Sort(g)
		out = append(out, source{configMap: cm, gates: g})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].configMap < out[j].configMap })
	return out, nil
}

// workload returns the kind and name of the Deployment or StatefulSet that
// controls the pod, or "" for a pod of neither.
func (p *player) workload(ctx context.Context, o *corev1.Pod) (kind, name string, err error) {
	owner := metav1.GetControllerOf(o)
	if owner == nil {
		return "", "", nil
	}
	switch owner.Kind {
	case "StatefulSet":
		return owner.Kind, owner.Name, nil
	case "ReplicaSet":
		var rs appsv1.ReplicaSet
		if err := p.c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: owner.Name}, &rs); err != nil {
			return "", "", fmt.Errorf("get replicaset %s: %w", owner.Name, err)
		}
		if d := metav1.GetControllerOf(&rs); d != nil && d.Kind == "Deployment" {
			return d.Kind, d.Name, nil
		}
	}
	return "", "", nil
}
