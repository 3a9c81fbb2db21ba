//go:build unix

package storm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodRunner starts the container of a pod as an OS process. onLog must
// receive the process's JSON log lines; the kubelet reads "Serving" from
// them to mark the pod Ready.
type PodRunner func(pod *corev1.Pod, onLog func(LogLine)) (*Process, error)

// WorkloadOptions configure a Workload.
type WorkloadOptions struct {
	// Client talks to the API server.
	Client client.Client
	// Namespace, Deployment and HPA name the workload's objects, which must
	// exist.
	Namespace  string
	Deployment string
	HPA        string
	// Run starts a pod's process.
	Run PodRunner
	// Endpoints receive a pod's address once it is Ready, and lose it when
	// it starts terminating.
	Endpoints *Endpoints
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
	// StatefulSet, when set, names the workload instead of Deployment: see
	// workload_statefulset.go.
	StatefulSet string
}

// Workload plays, for one Deployment and its HPA, the controllers and the
// kubelet that the control plane alone does not run:
//
//   - the HPA controller (Scale): it sets the Deployment's spec.replicas
//     through the scale subresource, then the HPA's status;
//   - the Deployment and ReplicaSet controllers: one ReplicaSet owned by
//     the Deployment, Pods owned by it created and deleted to match the
//     replica count, and the two objects' status kept current;
//   - the scheduler and the kubelet: a new Pod is bound to a node after
//     StartDelay and its process started; it is marked Running, and Ready
//     once the process logs "Serving"; a deleted Pod (graceful deletion
//     gives it a deletionTimestamp because it is bound) leaves the
//     endpoints, its process gets SIGTERM and finishes its in-flight calls,
//     and only after the process has exited is the Pod deleted for good;
//   - the Service: Endpoints hold exactly the Ready pods.
type Workload struct {
	opts     WorkloadOptions
	c        client.Client
	ctx      context.Context // ends every pod goroutine
	cancel   context.CancelFunc
	rsName   string
	rsOwner  metav1.OwnerReference // of the pods
	template corev1.PodTemplateSpec
	grace    time.Duration
	sts      string // the StatefulSet, when the workload is one

	kick chan struct{} // capacity 1: the status of the objects is stale
	wg   sync.WaitGroup

	mu      sync.Mutex
	desired int32              // the ReplicaSet's replicas
	pods    map[string]*simPod // every Pod object that exists
	errs    []error
}

// simPod is one Pod as the kubelet sees it.
type simPod struct {
	name        string
	uid         string
	created     time.Time
	started     bool // its process runs
	ready       bool
	terminating bool
	url         string
	stop        chan struct{} // closed when the Pod has been deleted
}

// PodCounts are the workload's pods at one moment.
type PodCounts struct {
	// Desired is the ReplicaSet's replicas.
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

// NewWorkload reads the Deployment, creates its ReplicaSet (with no pods)
// and starts keeping the objects' status current. Close it.
func NewWorkload(ctx context.Context, opts WorkloadOptions) (*Workload, error) {
	if opts.ServingTimeout <= 0 {
		opts.ServingTimeout = 30 * time.Second
	}
	if opts.Node == "" {
		opts.Node = "storm-node"
	}
	if opts.StatefulSet != "" {
		return newStatefulWorkload(ctx, opts)
	}
	c := opts.Client
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.Deployment}, &dep); err != nil {
		return nil, fmt.Errorf("storm: get deployment: %w", err)
	}
	hash := templateHash(dep.Spec.Template)
	tmpl := *dep.Spec.Template.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	sel := dep.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hash
	zero := int32(0)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       opts.Namespace,
			Name:            opts.Deployment + "-" + hash,
			Labels:          tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: sel, Template: tmpl},
	}
	if err := c.Create(ctx, rs); err != nil {
		return nil, fmt.Errorf("storm: create replicaset: %w", err)
	}
	return startWorkload(opts, rs.Name, *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet")), tmpl), nil
}

// startWorkload returns the workload whose pods owner creates, and starts
// keeping the objects' status current.
func startWorkload(opts WorkloadOptions, rsName string, owner metav1.OwnerReference, tmpl corev1.PodTemplateSpec) *Workload {
	grace := 30 * time.Second
	if g := tmpl.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	w := &Workload{
		opts:     opts,
		c:        opts.Client,
		rsName:   rsName,
		rsOwner:  owner,
		template: tmpl,
		grace:    grace,
		sts:      opts.StatefulSet,
		kick:     make(chan struct{}, 1),
		pods:     map[string]*simPod{},
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(1)
	go w.statusLoop()
	return w
}

// templateHash names the ReplicaSet of a pod template, as the Deployment
// controller does: a hash of the template, safe in a name.
func templateHash(t corev1.PodTemplateSpec) string {
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%v", t)
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// Start brings the workload to n replicas before the story begins, as a
// workload that has run a while: spec and HPA status at n, and n pods.
func (w *Workload) Start(ctx context.Context, n int32) error {
	if err := w.scaleDeployment(ctx, n); err != nil {
		return err
	}
	if err := w.setHPAStatus(ctx, n, n); err != nil {
		return err
	}
	return w.reconcile(ctx, n)
}

// Scale plays the HPA deciding on n replicas: the Deployment's spec.replicas
// through the scale subresource first, then the HPA's status; then the
// Deployment and ReplicaSet controllers' reaction (ReplicaSet replicas and
// Pods). It returns once the objects are written; pods start and stop in
// the background.
func (w *Workload) Scale(ctx context.Context, n int32) error {
	c := w.Counts()
	current := int32(c.Existing - c.Terminating)
	if err := w.scaleDeployment(ctx, n); err != nil {
		return err
	}
	if err := w.setHPAStatus(ctx, current, n); err != nil {
		return err
	}
	return w.reconcile(ctx, n)
}

func (w *Workload) scaleDeployment(ctx context.Context, n int32) error {
	var dep client.Object = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.opts.Deployment}}
	if w.sts != "" {
		dep = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.sts}}
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := w.c.SubResource("scale").Get(ctx, dep, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = n
		return w.c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale))
	})
	if err != nil {
		return fmt.Errorf("storm: scale deployment to %d: %w", n, err)
	}
	return nil
}

func (w *Workload) setHPAStatus(ctx context.Context, current, desired int32) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var hpa autoscalingv2.HorizontalPodAutoscaler
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.opts.Namespace, Name: w.opts.HPA}, &hpa); err != nil {
			return err
		}
		now := metav1.Now()
		hpa.Status.CurrentReplicas = current
		hpa.Status.DesiredReplicas = desired
		hpa.Status.LastScaleTime = &now
		return w.c.Status().Update(ctx, &hpa)
	})
	if err != nil {
		return fmt.Errorf("storm: update hpa status: %w", err)
	}
	return nil
}

// reconcile plays the ReplicaSet controller: n pods that are not
// terminating.
func (w *Workload) reconcile(ctx context.Context, n int32) error {
	if w.sts == "" {
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.rsName}}
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
		if err := w.c.Patch(ctx, rs, patch); err != nil {
			return fmt.Errorf("storm: scale replicaset: %w", err)
		}
	}

	w.mu.Lock()
	w.desired = n
	var active []*simPod
	for _, p := range w.pods {
		if !p.terminating {
			active = append(active, p)
		}
	}
	w.mu.Unlock()

	var errs []error
	for i := len(active); i < int(n); i++ {
		if err := w.createPod(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if extra := len(active) - int(n); extra > 0 {
		// The ReplicaSet controller deletes pods that are not ready before
		// ready ones, and the newest first.
		slices.SortFunc(active, w.deletionOrder)
		for _, p := range active[:extra] {
			if err := w.deletePod(ctx, p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	w.touch()
	return errors.Join(errs...)
}

// deletionOrder sorts the pods to delete first to the front.
func (w *Workload) deletionOrder(a, b *simPod) int {
	if w.sts != "" {
		return w.statefulDeletionOrder(a, b)
	}
	if a.ready != b.ready {
		if !a.ready {
			return -1
		}
		return 1
	}
	return b.created.Compare(a.created)
}

// createPod creates one Pod of the ReplicaSet and starts its kubelet.
func (w *Workload) createPod(ctx context.Context) error {
	t := w.template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       w.opts.Namespace,
			GenerateName:    w.rsName + "-",
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			OwnerReferences: []metav1.OwnerReference{w.rsOwner},
		},
		Spec: t.Spec,
	}
	if w.sts != "" {
		w.nameStatefulPod(pod)
	}
	if err := w.c.Create(ctx, pod); err != nil {
		return fmt.Errorf("storm: create pod: %w", err)
	}
	p := &simPod{name: pod.Name, uid: string(pod.UID), created: time.Now(), stop: make(chan struct{})}
	w.mu.Lock()
	w.pods[p.name] = p
	w.mu.Unlock()
	w.wg.Add(1)
	go w.kubelet(pod, p)
	return nil
}

// deletePod plays the ReplicaSet controller deleting a pod: a graceful
// delete, which for a bound pod only sets its deletionTimestamp.
func (w *Workload) deletePod(ctx context.Context, p *simPod) error {
	w.mu.Lock()
	if p.terminating {
		w.mu.Unlock()
		return nil
	}
	p.terminating = true
	p.ready = false
	w.mu.Unlock()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: p.name}}
	err := w.c.Delete(ctx, pod)
	close(p.stop)
	if err != nil {
		return fmt.Errorf("storm: delete pod %s: %w", p.name, err)
	}
	return nil
}

// kubelet runs one pod from its creation to its final deletion.
func (w *Workload) kubelet(pod *corev1.Pod, p *simPod) {
	defer w.wg.Done()
	defer w.forget(p)
	ctx := w.ctx

	select {
	case <-time.After(w.opts.StartDelay):
	case <-p.stop:
		// Deleted before it was scheduled: the API server deleted it at
		// once, as it does for a pod bound to no node.
		return
	case <-ctx.Done():
		return
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: w.opts.Node},
	}
	if err := w.c.SubResource("binding").Create(ctx, pod, binding); err != nil {
		w.fail(fmt.Errorf("storm: bind pod %s: %w", p.name, err))
		return
	}

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
		return
	}
	w.mu.Lock()
	p.started = true
	w.mu.Unlock()
	started := metav1.Now()
	if err := w.setStatus(ctx, pod.Name, started, false); err != nil {
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
		return
	case <-timeout.C:
		w.fail(fmt.Errorf("storm: pod %s did not log %q within %v; its last lines:\n%s", p.name, MsgServing, w.opts.ServingTimeout, proc.Tail()))
		proc.Kill()
		<-proc.Done()
		w.finalDelete(p)
		return
	case <-p.stop:
	case <-ctx.Done():
	}

	if p.url != "" {
		select {
		case <-p.stop:
		case <-ctx.Done():
		default:
			if err := w.setStatus(ctx, pod.Name, started, true); err != nil {
				w.fail(err)
			}
			w.mu.Lock()
			if !p.terminating {
				p.ready = true
				w.opts.Endpoints.Add(p.url)
			}
			w.mu.Unlock()
			w.touch()
		}
	}

	select {
	case <-p.stop:
	case <-ctx.Done():
	case <-proc.Done():
		w.fail(proc.Exited())
	}
	// The endpoints controller and the kubelet both react to the deletion;
	// traffic stops a moment before the signal, as a preStop hook arranges,
	// so that requests already on their way do not meet a closed listener.
	if p.url != "" {
		w.opts.Endpoints.Remove(p.url)
	}
	w.mu.Lock()
	p.ready = false
	w.mu.Unlock()
	w.touch()
	if p.url != "" {
		time.Sleep(w.opts.PreStop)
	}
	if err := proc.Terminate(w.grace); err != nil {
		w.fail(fmt.Errorf("storm: pod %s: %w", p.name, err))
	}
	w.mu.Lock()
	p.started = false
	w.mu.Unlock()
	w.finalDelete(p)
}

// setStatus plays the kubelet's status updates: Running once the container
// runs, Ready once the process serves.
func (w *Workload) setStatus(ctx context.Context, name string, started metav1.Time, ready bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: w.opts.Namespace, Name: name}, &pod); err != nil {
			return err
		}
		readyStatus := corev1.ConditionFalse
		if ready {
			readyStatus = corev1.ConditionTrue
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.HostIP = "127.0.0.1"
		pod.Status.PodIP = "127.0.0.1"
		pod.Status.StartTime = &started
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: readyStatus, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: readyStatus, LastTransitionTime: now},
		}
		var statuses []corev1.ContainerStatus
		for _, ct := range pod.Spec.Containers {
			statuses = append(statuses, corev1.ContainerStatus{
				Name:    ct.Name,
				Image:   ct.Image,
				Ready:   ready,
				Started: &ready,
				State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			})
		}
		pod.Status.ContainerStatuses = statuses
		return w.c.Status().Update(ctx, &pod)
	})
}

// finalDelete plays the kubelet's last word on a pod whose containers have
// stopped: a delete with no grace period, which removes the object.
func (w *Workload) finalDelete(p *simPod) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: p.name}}
	uid := types.UID(p.uid)
	err := w.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
	if client.IgnoreNotFound(err) != nil {
		w.fail(fmt.Errorf("storm: delete pod %s: %w", p.name, err))
	}
}

// forget drops a pod that no longer exists.
func (w *Workload) forget(p *simPod) {
	w.mu.Lock()
	delete(w.pods, p.name)
	w.mu.Unlock()
	w.touch()
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

// touch asks the status loop to bring the objects' status up to date.
func (w *Workload) touch() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// statusLoop plays the ReplicaSet and Deployment controllers writing their
// objects' status; bursts of pod changes coalesce into one write.
func (w *Workload) statusLoop() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-w.kick:
		}
		c := w.Counts()
		active := int32(c.Existing - c.Terminating)
		ready := int32(c.Ready)
		ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
		if w.sts != "" {
			err := w.writeStatefulSetStatus(ctx, active, ready)
			cancel()
			if err != nil && w.ctx.Err() == nil {
				w.fail(fmt.Errorf("storm: update workload status: %w", err))
			}
			continue
		}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.rsName}}
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil,
			`{"status":{"replicas":%d,"fullyLabeledReplicas":%[1]d,"readyReplicas":%d,"availableReplicas":%[2]d}}`, active, ready))
		err := w.c.Status().Patch(ctx, rs, patch)
		if err == nil {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: w.opts.Deployment}}
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := w.c.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
					return err
				}
				dep.Status.Replicas = active
				dep.Status.UpdatedReplicas = active
				dep.Status.ReadyReplicas = ready
				dep.Status.AvailableReplicas = ready
				dep.Status.UnavailableReplicas = max(0, active-ready)
				dep.Status.ObservedGeneration = dep.Generation
				return w.c.Status().Update(ctx, dep)
			})
		}
		cancel()
		if err != nil && w.ctx.Err() == nil {
			w.fail(fmt.Errorf("storm: update workload status: %w", err))
		}
	}
}

// Close terminates every pod gracefully, as a scale to zero would, waits
// for their processes to end and their objects to go, and stops the
// simulation.
func (w *Workload) Close(ctx context.Context) error {
	w.mu.Lock()
	var all []*simPod
	for _, p := range w.pods {
		all = append(all, p)
	}
	w.mu.Unlock()
	var errs []error
	for _, p := range all {
		if err := w.deletePod(ctx, p); client.IgnoreNotFound(errors.Unwrap(err)) != nil {
			errs = append(errs, err)
		}
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
			errs = append(errs, fmt.Errorf("storm: %d pods still terminating: %w", n, ctx.Err()))
			break wait
		case <-t.C:
		}
	}
	w.cancel()
	w.wg.Wait()
	return errors.Join(errs...)
}
