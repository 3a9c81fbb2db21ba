//go:build unix

package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	autoscalinginformers "k8s.io/client-go/informers/autoscaling/v2"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/kubelet"
)

// The workload kinds a Workload may run.
const (
	KindDeployment  = "Deployment"
	KindStatefulSet = "StatefulSet"
)

// PodRunner starts the container of a pod as an OS process. onLog must
// receive the process's JSON log lines; the kubelet reads "Serving" from
// them to mark the pod Ready.
type PodRunner func(pod *corev1.Pod, onLog func(LogLine)) (*Process, error)

// Endpoints receive the address of every Ready pod of a workload, as a
// Service's endpoints do (the storm's traffic.Endpoints, which its load
// sends to).
type Endpoints interface {
	// Add starts sending traffic to url.
	Add(url string)
	// Remove stops sending new traffic to url.
	Remove(url string)
}

// WorkloadOptions configure a Workload.
type WorkloadOptions struct {
	// Client talks to the API server.
	Client client.Client
	// Config is the API server's config, for the kubelet's watches.
	Config *rest.Config
	// Namespace, Name and HPA name the workload's objects, which must
	// exist: a Deployment, or a StatefulSet when Kind says so, and its HPA.
	Namespace string
	// Kind is KindDeployment (when empty) or KindStatefulSet.
	Kind string
	Name string
	HPA  string
	// Run starts a pod's process.
	Run PodRunner
	// Endpoints receive a pod's address once it is Ready, and lose it when
	// it starts terminating.
	Endpoints Endpoints
	// StartDelay is the time from a Pod's creation to its process starting:
	// scheduling and container start.
	StartDelay time.Duration
	// ServingTimeout bounds the time from process start to "Serving".
	ServingTimeout time.Duration
	// Node is the node name pods are bound to.
	Node string
	// PreStop is the pause between a pod leaving the endpoints and its
	// process getting SIGTERM.
	PreStop time.Duration
	// Metrics is the custom metrics API through which Scale asks the HPA
	// for a replica count.
	Metrics *MetricsAPI
}

// Workload plays, for one Deployment or StatefulSet, the parts of a cluster
// that the API server and kube-controller-manager (whose Deployment,
// ReplicaSet, StatefulSet and garbage-collector controllers create and
// delete the Pods) do not run:
//
//   - the scheduler: a new Pod of the workload is bound to the node, with
//     a Binding, StartDelay after the kubelet first sees it;
//   - the kubelet: a bound Pod's container is a process started by Run; the
//     Pod is marked Running, and Ready once the process logs "Serving"; a
//     Pod given a deletionTimestamp (graceful deletion of a bound pod)
//     leaves the endpoints, its process gets SIGTERM and finishes its
//     in-flight calls, and only after the process has exited is the Pod
//     deleted with grace period 0, as the kubelet does; a StatefulSet's pod
//     deleted and created again under its name is a new Pod (a new UID)
//     and gets a new process, once the old one has exited;
//   - the Service: Endpoints hold exactly the Ready pods, from the moment
//     the kubelet sees them Ready to the moment it sees their deletion;
//
// The HPA controller decides the replica count. A scenario with scale steps
// of its own asks it for them through Scale, which sets the ReplicasMetric
// the HPA of such a scenario scales on (see DictateHPA).
type Workload struct {
	opts     WorkloadOptions
	c        client.Client
	ctx      context.Context // ends every pod goroutine and the watches
	cancel   context.CancelFunc
	selector labels.Selector
	wg       sync.WaitGroup

	mu      sync.Mutex
	desired int32              // the workload's spec.replicas
	scales  []ScaleEvent       // every change of desired seen
	hpa     HPAStatus          // the HPA's status, as last seen
	pods    map[string]*simPod // every Pod object the kubelet runs
	seen    map[types.UID]bool // every Pod the kubelet ever ran
	lives   []*simPod          // the same, in the order the kubelet saw them
	// finished names Pods that exist only as a finished pod left behind
	// (an evicted or completed one, see createFinishedPod): the kubelet
	// never runs them, even in the instant before their phase is written.
	finished map[string]bool
	errs     []error
}

// simPod is one Pod as the kubelet sees it.
type simPod struct {
	name        string
	uid         types.UID
	created     time.Time
	started     bool // its process runs
	ready       bool
	terminating bool
	url         string
	stop        chan struct{} // closed when the Pod is being deleted
	// life is when it went through each stage.
	life PodLife
}

// PodLife is one Pod the kubelet ran, from the moment it saw it: when its
// process started, when the kubelet began writing its Ready status, when
// its deletion began (the kubelet saw it, or a new Pod took its name) and
// when its process had exited. A zero time is a stage it did not reach.
// URL is its address in the endpoints, once it was Ready.
type PodLife struct {
	Name                                   string
	UID                                    types.UID
	URL                                    string
	Seen, Started, Ready, Stopping, Exited time.Time
}

// PodCounts are the workload's pods at one moment.
type PodCounts struct {
	// Desired is the workload's spec.replicas.
	Desired int32
	// Existing counts the Pod objects, terminating ones included.
	Existing int
	// Ready counts the pods in the endpoints.
	Ready int
	// Terminating counts the pods being stopped.
	Terminating int
	// Started counts the pods whose process runs, terminating ones
	// included.
	Started int
}

// NewWorkload registers the node, reads the workload and starts watching it
// and its Pods. Close it.
func NewWorkload(ctx context.Context, opts WorkloadOptions) (*Workload, error) {
	if opts.ServingTimeout <= 0 {
		opts.ServingTimeout = 30 * time.Second
	}
	if opts.Node == "" {
		opts.Node = NodeName
	}
	if opts.Kind == "" {
		opts.Kind = KindDeployment
	}
	c := opts.Client
	// The kubelet registers its node before it runs a pod.
	if err := kubelet.CreateNode(ctx, c, opts.Node); err != nil {
		return nil, fmt.Errorf("storm: %w", err)
	}
	obj, err := workloadObject(opts.Kind, opts.Namespace, opts.Name)
	if err != nil {
		return nil, err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, fmt.Errorf("storm: get %s %s: %w", opts.Kind, opts.Name, err)
	}
	replicas, selector := workloadSpec(obj)
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("storm: %s %s: selector: %w", opts.Kind, opts.Name, err)
	}
	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("storm: workload clientset: %w", err)
	}
	w := &Workload{
		opts:     opts,
		c:        c,
		selector: sel,
		pods:     map[string]*simPod{},
		seen:     map[types.UID]bool{},
	}
	if replicas != nil {
		w.desired = *replicas
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())

	pods := coreinformers.NewFilteredPodInformer(cs, opts.Namespace, 0, cache.Indexers{}, func(lo *metav1.ListOptions) {
		lo.LabelSelector = sel.String()
	})
	byName := func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.Name).String()
	}
	var owner cache.SharedIndexInformer
	if opts.Kind == KindStatefulSet {
		owner = appsinformers.NewFilteredStatefulSetInformer(cs, opts.Namespace, 0, cache.Indexers{}, byName)
	} else {
		owner = appsinformers.NewFilteredDeploymentInformer(cs, opts.Namespace, 0, cache.Indexers{}, byName)
	}
	hpas := autoscalinginformers.NewFilteredHorizontalPodAutoscalerInformer(cs, opts.Namespace, 0, cache.Indexers{}, func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.HPA).String()
	})
	// The workload and its HPA are followed on every add and update; pods
	// on deletion too.
	follow := func(f func(any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, obj any) { f(obj) }}
	}
	podHandler := follow(func(obj any) { w.observePod(obj, false) })
	podHandler.DeleteFunc = func(obj any) { w.observePod(obj, true) }
	for inf, h := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		pods: podHandler, owner: follow(w.observeWorkload), hpas: follow(w.observeHPA),
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			w.cancel()
			return nil, err
		}
	}
	for _, inf := range []cache.SharedIndexInformer{pods, owner, hpas} {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			inf.RunWithContext(w.ctx)
		}()
	}
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, owner.HasSynced, hpas.HasSynced) {
		w.cancel()
		w.wg.Wait()
		return nil, fmt.Errorf("storm: workload %s: watches did not sync: %w", opts.Name, ctx.Err())
	}
	return w, nil
}

// workloadObject returns an object of the kind, named, for a client to read
// into, scale or delete.
func workloadObject(kind, namespace, name string) (client.Object, error) {
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	switch kind {
	case KindDeployment:
		return &appsv1.Deployment{ObjectMeta: meta}, nil
	case KindStatefulSet:
		return &appsv1.StatefulSet{ObjectMeta: meta}, nil
	}
	return nil, fmt.Errorf("storm: workload kind %q: must be %s or %s", kind, KindDeployment, KindStatefulSet)
}

// workloadSpec returns a Deployment's or StatefulSet's spec.replicas and
// selector; nil for any other object.
func workloadSpec(obj any) (*int32, *metav1.LabelSelector) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Replicas, o.Spec.Selector
	case *appsv1.StatefulSet:
		return o.Spec.Replicas, o.Spec.Selector
	}
	return nil, nil
}

// observeWorkload follows the workload's spec.replicas: each change is a
// decision of the HPA controller (or Start's).
func (w *Workload) observeWorkload(obj any) {
	replicas, _ := workloadSpec(obj)
	if replicas == nil {
		return
	}
	w.mu.Lock()
	if n := *replicas; n != w.desired {
		w.scales = append(w.scales, ScaleEvent{At: time.Now(), From: w.desired, To: n})
		w.desired = n
	}
	w.mu.Unlock()
}

// ScaleEvent is the autoscaler changing the replica count.
type ScaleEvent struct {
	// At is when the harness saw the workload's spec.replicas change.
	At       time.Time
	From, To int32
}

// HPAStatus is what the HPA controller last wrote in the HPA's status.
type HPAStatus struct {
	// Desired is status.desiredReplicas.
	Desired int32
	// Metric is the current value of its first metric: the average per
	// pod for a Pods metric, the value for an Object metric; MetricOK is
	// false while the controller has none.
	Metric   float64
	MetricOK bool
}

// observeHPA follows the HPA's status.
func (w *Workload) observeHPA(obj any) {
	hpa, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return
	}
	st := HPAStatus{Desired: hpa.Status.DesiredReplicas}
	for _, m := range hpa.Status.CurrentMetrics {
		var q *resource.Quantity
		switch {
		case m.Pods != nil:
			q = m.Pods.Current.AverageValue
		case m.Object != nil:
			q = m.Object.Current.Value
			if q == nil {
				q = m.Object.Current.AverageValue
			}
		}
		if q != nil {
			st.Metric, st.MetricOK = q.AsApproximateFloat64(), true
			break
		}
	}
	w.mu.Lock()
	w.hpa = st
	w.mu.Unlock()
}

// HPA returns the HPA's status as last seen.
func (w *Workload) HPA() HPAStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hpa
}

// Scales returns the changes of the workload's replicas seen since since.
func (w *Workload) Scales(since time.Time) []ScaleEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ScaleEvent
	for _, sc := range w.scales {
		if !sc.At.Before(since) {
			out = append(out, sc)
		}
	}
	return out
}

// observePod is the kubelet's view of a Pod event: a new Pod gets a
// kubelet goroutine, a Pod being deleted (or gone) is stopped.
func (w *Workload) observePod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || !w.selector.Matches(labels.Set(pod.Labels)) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pods[pod.Name]
	if p != nil && p.uid != pod.UID {
		if w.seen[pod.UID] {
			// A late event about a Pod the kubelet ran under this name
			// before.
			return
		}
		// The name is a new Pod's (a StatefulSet's pod created again): the
		// one the kubelet ran under it is gone, whether or not its deletion
		// reached this watch (a relist shows only the new one). Its process
		// is stopped, if that has not begun yet, before the new one starts.
		w.stopLocked(p)
		p = nil
	}
	if p == nil {
		// A Pod the kubelet ran once is never started again, whatever late
		// event about it arrives.
		if deleted || pod.DeletionTimestamp != nil || w.seen[pod.UID] || w.finished[pod.Name] || w.ctx.Err() != nil ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		w.seen[pod.UID] = true
		now := time.Now()
		p = &simPod{name: pod.Name, uid: pod.UID, created: now, stop: make(chan struct{}), life: PodLife{Name: pod.Name, UID: pod.UID, Seen: now}}
		w.pods[p.name] = p
		w.lives = append(w.lives, p)
		w.wg.Add(1)
		go w.kubelet(pod.DeepCopy(), p)
		return
	}
	if deleted || pod.DeletionTimestamp != nil {
		w.stopLocked(p)
	}
}

// stopLocked starts the end of a pod: it is no longer Ready and its
// kubelet goroutine stops it.
func (w *Workload) stopLocked(p *simPod) {
	if p.terminating {
		return
	}
	p.terminating = true
	p.ready = false
	p.life.Stopping = time.Now()
	close(p.stop)
}

// Start brings the workload to n replicas before the story begins, as a
// workload that has run a while: the workload's spec at n, through its
// scale subresource, and the ReplicasMetric at n for an HPA that scales on
// it; the controllers create the pods.
func (w *Workload) Start(ctx context.Context, n int32) error {
	if w.opts.Metrics != nil {
		w.opts.Metrics.SetReplicas(w.opts.Namespace, w.opts.Kind, w.opts.Name, n)
	}
	obj, err := workloadObject(w.opts.Kind, w.opts.Namespace, w.opts.Name)
	if err != nil {
		return err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := w.c.SubResource("scale").Get(ctx, obj, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = n
		return w.c.SubResource("scale").Update(ctx, obj, client.WithSubResourceBody(scale))
	})
	if err != nil {
		return fmt.Errorf("storm: scale %s %s to %d: %w", w.opts.Kind, w.opts.Name, n, err)
	}
	return nil
}

// Scale asks the HPA for n replicas, for a scenario with scale steps of its
// own: it sets the workload's ReplicasMetric, which that scenario's HPA
// (DictateHPA) follows exactly at its next sync. The HPA controller then
// scales the workload through its scale subresource, and the Deployment and
// ReplicaSet controllers, or the StatefulSet controller, create or delete
// Pods.
func (w *Workload) Scale(_ context.Context, n int32) error {
	if w.opts.Metrics == nil {
		return errors.New("storm: Scale needs the custom metrics API (WorkloadOptions.Metrics)")
	}
	w.opts.Metrics.SetReplicas(w.opts.Namespace, w.opts.Kind, w.opts.Name, n)
	return nil
}

// kubelet runs one pod from its creation to its final deletion: the
// scheduler binds it, its container starts and serves, the pod is Ready
// until its deletion begins, and its container stops.
func (w *Workload) kubelet(pod *corev1.Pod, p *simPod) {
	defer w.wg.Done()
	defer w.forget(p)
	if !w.bind(pod, p) {
		return
	}
	proc, started, ok := w.startContainer(pod, p)
	if !ok {
		return
	}
	if p.url != "" {
		w.markReady(p, started)
	}
	select {
	case <-p.stop:
	case <-w.ctx.Done():
	case <-proc.Done():
		w.fail(proc.Exited())
	}
	w.stopContainer(pod, p, proc)
}

// bind plays the scheduler: StartDelay after the pod appeared, a Binding
// to the node. It returns false when the pod is gone before.
func (w *Workload) bind(pod *corev1.Pod, p *simPod) bool {
	ctx := w.ctx
	select {
	case <-time.After(w.opts.StartDelay):
	case <-p.stop:
		// Deleted before it was scheduled: the API server deleted it at
		// once, as it does for a pod bound to no node.
		return false
	case <-ctx.Done():
		return false
	}
	if err := kubelet.Bind(ctx, w.c, pod, w.opts.Node); err != nil {
		// A pod deleted before it was bound is gone at once, whether or not
		// its deletion has reached the watch yet; its name may already be a
		// new Pod's.
		if !kubelet.Gone(err) && ctx.Err() == nil {
			w.fail(fmt.Errorf("storm: bind pod %s: %w", p.name, err))
		}
		return false
	}
	return true
}

// startContainer starts the bound pod's process, marks the pod Running
// and waits for the process to log "Serving", which sets p.url, or for the
// pod's deletion. ok is false when the process failed to start or serve:
// the pod is then deleted.
func (w *Workload) startContainer(pod *corev1.Pod, p *simPod) (proc *Process, started metav1.Time, ok bool) {
	serving := make(chan string, 1)
	proc, err := w.opts.Run(pod, func(l LogLine) {
		if l.Msg == MsgServing && l.Address != "" {
			select {
			case serving <- l.Address:
			default:
			}
		}
	})
	if err != nil {
		w.fail(fmt.Errorf("storm: start pod %s: %w", p.name, err))
		w.finalDelete(p)
		return nil, started, false
	}
	w.mu.Lock()
	p.started = true
	p.life.Started = time.Now()
	w.mu.Unlock()
	started = metav1.Now()
	if err := w.setStatus(w.ctx, p, started, false); err != nil {
		w.fail(err)
	}

	timeout := time.NewTimer(w.opts.ServingTimeout)
	defer timeout.Stop()
	select {
	case addr := <-serving:
		p.url = "http://" + addr
	case <-proc.Done():
		w.fail(proc.Exited())
		w.finalDelete(p)
		return nil, started, false
	case <-timeout.C:
		w.fail(fmt.Errorf("storm: pod %s did not log %q within %v; its last lines:\n%s", p.name, MsgServing, w.opts.ServingTimeout, proc.Tail()))
		proc.Kill()
		<-proc.Done()
		w.finalDelete(p)
		return nil, started, false
	case <-p.stop:
	case <-w.ctx.Done():
	}
	return proc, started, true
}

// markReady writes the serving pod's Ready status and adds it to the
// endpoints, unless its deletion has begun.
func (w *Workload) markReady(p *simPod, started metav1.Time) {
	select {
	case <-p.stop:
	case <-w.ctx.Done():
	default:
		// Ready from the moment the status is written: the controllers may
		// act on it before the write returns.
		readyAt := time.Now()
		if err := w.setStatus(w.ctx, p, started, true); err != nil {
			w.fail(err)
		}
		w.mu.Lock()
		if !p.terminating {
			p.ready = true
			p.life.Ready, p.life.URL = readyAt, p.url
			w.opts.Endpoints.Add(p.url)
		}
		w.mu.Unlock()
	}
}

// stopContainer stops a pod whose deletion began (or whose process ended):
// out of the endpoints, the preStop pause, SIGTERM with the pod's grace
// period, and the final delete once the process has exited.
func (w *Workload) stopContainer(pod *corev1.Pod, p *simPod, proc *Process) {
	// The endpoints controller and the kubelet both react to the deletion;
	// traffic stops a moment before the signal, as a preStop hook arranges,
	// so that requests already on their way do not meet a closed listener.
	if p.url != "" {
		w.opts.Endpoints.Remove(p.url)
	}
	w.mu.Lock()
	p.ready = false
	w.mu.Unlock()
	if p.url != "" {
		time.Sleep(w.opts.PreStop)
	}
	grace := 30 * time.Second
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if err := proc.Terminate(grace); err != nil {
		w.fail(fmt.Errorf("storm: pod %s: %w", p.name, err))
	}
	w.mu.Lock()
	p.started = false
	p.life.Exited = time.Now()
	w.mu.Unlock()
	w.finalDelete(p)
}

// setStatus plays the kubelet's status updates: Running once the container
// runs, Ready once the process serves.
func (w *Workload) setStatus(ctx context.Context, p *simPod, started metav1.Time, ready bool) error {
	return kubelet.SetStatus(ctx, w.c, w.opts.Namespace, p.name, p.uid, started, ready)
}

// finalDelete plays the kubelet's last word on a pod whose containers have
// stopped: a delete with no grace period, which removes the object.
func (w *Workload) finalDelete(p *simPod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kubelet.Delete(ctx, w.c, w.opts.Namespace, p.name, p.uid); err != nil {
		w.fail(fmt.Errorf("storm: %w", err))
	}
}

// forget drops a pod that no longer exists.
func (w *Workload) forget(p *simPod) {
	w.mu.Lock()
	if w.pods[p.name] == p {
		delete(w.pods, p.name)
	}
	w.mu.Unlock()
}

// WaitReady waits until n pods exist and are Ready, and fails when a pod
// failed or timeout passed.
func (w *Workload) WaitReady(ctx context.Context, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if err := w.Err(); err != nil {
			return err
		}
		c := w.Counts()
		if c.Ready == n && c.Existing == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("storm: waiting for %d ready pods (have %d of %d): %w", n, c.Ready, c.Existing, ctx.Err())
		case <-t.C:
		}
	}
}

// Lives returns every Pod the kubelet ran, in the order it first saw them,
// a StatefulSet's pod created again under its name once per Pod.
func (w *Workload) Lives() []PodLife {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]PodLife, len(w.lives))
	for i, p := range w.lives {
		out[i] = p.life
	}
	return out
}

// Running returns the names of the pods that exist and are not terminating.
func (w *Workload) Running() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, p := range w.pods {
		if !p.terminating {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

// Ready returns the names of the pods in the endpoints.
func (w *Workload) Ready() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, p := range w.pods {
		if p.ready {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

// Counts returns the workload's pod counts now.
func (w *Workload) Counts() PodCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.countsLocked()
}

func (w *Workload) countsLocked() PodCounts {
	s := PodCounts{Desired: w.desired, Existing: len(w.pods)}
	for _, p := range w.pods {
		if p.ready {
			s.Ready++
		}
		if p.terminating {
			s.Terminating++
		}
		if p.started {
			s.Started++
		}
	}
	return s
}

// fail records a failure of the simulation (a pod that could not start, a
// process that died, an API call that failed).
func (w *Workload) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

// Err returns the failures so far, joined; nil when there were none.
func (w *Workload) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}

// RaiseFloor sets the HPA's minReplicas to n. The HPA controller scales a
// workload below its floor up to it without reading any metric, so this
// asks for n pods even while the metrics API is not served yet (right after
// the API server restarted, its aggregation layer has to find the metrics
// server again).
func (w *Workload) RaiseFloor(ctx context.Context, n int32) error {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.opts.Namespace, Name: w.opts.HPA}, hpa); err != nil {
		return fmt.Errorf("storm: get hpa: %w", err)
	}
	patch := client.MergeFrom(hpa.DeepCopy())
	hpa.Spec.MinReplicas = &n
	if err := w.c.Patch(ctx, hpa, patch); err != nil {
		return fmt.Errorf("storm: raise hpa %s's minReplicas to %d: %w", w.opts.HPA, n, err)
	}
	return nil
}

// Close stops the workload as deleting it would: the HPA is deleted, so
// that nothing scales the workload again, then the workload, whose
// ReplicaSet (a Deployment's) and Pods the garbage collector deletes; the
// kubelet terminates every pod gracefully. It waits for the pods to go,
// deletes any left when ctx ends, and stops the watches.
func (w *Workload) Close(ctx context.Context) error {
	var errs []error
	bg := client.PropagationPolicy(metav1.DeletePropagationBackground)
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.opts.HPA}}
	if err := w.c.Delete(ctx, hpa); client.IgnoreNotFound(err) != nil {
		errs = append(errs, fmt.Errorf("storm: delete hpa: %w", err))
	}
	if obj, err := workloadObject(w.opts.Kind, w.opts.Namespace, w.opts.Name); err != nil {
		errs = append(errs, err)
	} else if err := w.c.Delete(ctx, obj, bg); client.IgnoreNotFound(err) != nil {
		errs = append(errs, fmt.Errorf("storm: delete %s %s: %w", w.opts.Kind, w.opts.Name, err))
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
wait:
	for {
		w.mu.Lock()
		n := len(w.pods)
		w.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("storm: %d pods still there after the %s's deletion: %w", n, w.opts.Kind, ctx.Err()))
			break wait
		case <-t.C:
		}
	}
	w.mu.Lock()
	for _, p := range w.pods {
		w.stopLocked(p)
	}
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	return errors.Join(errs...)
}
