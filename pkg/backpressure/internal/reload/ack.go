package reload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// The environment variables that name the pod to acknowledge on, set through
// the downward API (fieldRef metadata.name and metadata.namespace).
const (
	EnvPodName      = "POD_NAME"
	EnvPodNamespace = "POD_NAMESPACE"
)

// ackFieldManager names this library in the pod's managedFields.
const ackFieldManager = "backpressure-runtime"

// ackTimeout bounds one patch, so a hung request cannot hold back later
// acknowledgements.
const ackTimeout = 30 * time.Second

// AckOptions turn acknowledgement on: the source patches its own pod (a
// JSON merge patch) so that the annotation applied.backpressure.dev/<gate>
// carries plan.AckFor(d).String(), "<epoch>/<revision>", of the newest plan
// d of each gate that the pod enforces. The operator moves capacity to other
// pods only once the pods giving it up have acknowledged their smaller
// share, so a revision is acknowledged only once Options.Enforced says so
// (with a Runtime: once the calls in flight fit the revision's permits);
// without Enforced, as soon as the subscriber has returned. A newer
// revision of a gate supersedes one still waiting. On shutdown, Release
// writes "<epoch>/released". Failed patches are logged and retried with
// backoff until they succeed or the source stops; they never stop the
// source.
//
// The pod is named by the environment variables POD_NAME and POD_NAMESPACE;
// when either is empty acknowledgement stays off and the source says so in
// its log. The pod's service account needs the patch verb on pods.
type AckOptions struct {
	// Client patches the pod. NewConfigMapSource uses its own client when
	// Client is nil; NewDirSource requires one.
	Client kubernetes.Interface
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Backoff paces the retries of a failed patch. A zero Duration means the
	// default: 500ms, doubling up to one minute, with 20% jitter. Steps is
	// ignored: retries go on for as long as the source runs.
	Backoff wait.Backoff
}

// acker keeps the own pod's applied annotations equal to the plans the pod
// enforces. set records the plans delivered; a plan waits, on a goroutine
// of its own, until enforced says it is in force, and then becomes wanted;
// run patches until the pod carries what is wanted.
type acker struct {
	client    kubernetes.Interface
	namespace string
	pod       string
	log       logr.Logger
	metrics   *reloadMetrics
	backoff   wait.Backoff
	enforced  func(context.Context, plan.Document) error // nil: acknowledge at once

	kick chan struct{} // capacity 1: "want changed"

	// ctx bounds the waiting goroutines; cancel and wg stop them (stop).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	target   map[string]string             // gate → the acknowledgement of its newest delivered plan
	waiting  map[string]context.CancelFunc // gate → cancels the wait for target's enforcement
	want     map[string]string             // annotation key → acknowledgement to write
	done     map[string]string             // what the pod is known to carry
	invalid  map[string]bool               // gates that cannot form an annotation key, logged once
	silent   bool                          // the pod declares it does not acknowledge, as last patched
	stopped  bool                          // stop was called: start no more waits
	released bool                          // Release has begun: write no more revisions
}

// newAcker returns nil when acknowledgement is off.
func newAcker(opts *AckOptions, enforced func(context.Context, plan.Document) error,
	fallback kubernetes.Interface, log logr.Logger, m *reloadMetrics) (*acker, error) {
	if opts == nil {
		return nil, nil
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	pod, ns := getenv(EnvPodName), getenv(EnvPodNamespace)
	if pod == "" || ns == "" {
		log.Info("Acknowledgement is on but the pod is unknown; plans will not be acknowledged",
			"podNameVar", EnvPodName, "podNamespaceVar", EnvPodNamespace)
		return nil, nil
	}
	client := opts.Client
	if client == nil {
		client = fallback
	}
	if client == nil {
		return nil, errors.New("reload: acknowledgement needs AckOptions.Client")
	}
	b := opts.Backoff
	if b.Duration <= 0 {
		b = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Minute}
	}
	b.Steps = math.MaxInt32
	ctx, cancel := context.WithCancel(context.Background())
	return &acker{
		client:    client,
		namespace: ns,
		pod:       pod,
		log:       log.WithValues("pod", ns+"/"+pod),
		metrics:   m,
		backoff:   b,
		enforced:  enforced,
		kick:      make(chan struct{}, 1),
		ctx:       ctx,
		cancel:    cancel,
		target:    map[string]string{},
		waiting:   map[string]context.CancelFunc{},
		want:      map[string]string{},
		done:      map[string]string{},
		invalid:   map[string]bool{},
	}, nil
}

// set records the plans delivered, the full documents as in Update.Plans;
// it never blocks. A gate whose plan has a new epoch or revision cancels the
// wait for its previous one: a pod acknowledges the newest revision it
// enforces, and an older one that has not settled yet never will matter.
func (a *acker) set(plans map[string]plan.Document) {
	a.mu.Lock()
	changed := false
	for gate, d := range plans {
		key, ok := a.keyLocked(gate)
		if !ok {
			continue
		}
		ack := plan.AckFor(d).String()
		if a.target[gate] == ack || a.released || a.stopped {
			continue
		}
		a.target[gate] = ack
		if cancel := a.waiting[gate]; cancel != nil {
			cancel()
			delete(a.waiting, gate)
		}
		if a.enforced == nil {
			a.want[key] = ack
			changed = true
			continue
		}
		ctx, cancel := context.WithCancel(a.ctx)
		a.waiting[gate] = cancel
		a.wg.Go(func() { a.await(ctx, gate, key, ack, d) })
	}
	a.mu.Unlock()
	if changed {
		a.poke()
	}
}

// await waits until d is enforced, then wants its acknowledgement unless a
// newer plan has superseded it meanwhile.
func (a *acker) await(ctx context.Context, gate, key, ack string, d plan.Document) {
	if err := a.enforced(ctx, d); err != nil {
		return // superseded, or the source stopped
	}
	a.mu.Lock()
	ok := a.target[gate] == ack && !a.released
	if ok {
		a.want[key] = ack
		delete(a.waiting, gate)
	}
	a.mu.Unlock()
	if ok {
		a.poke()
	}
}

func (a *acker) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// keyLocked returns the annotation key of gate, and false (logged once per
// gate) when the gate's name cannot form one.
func (a *acker) keyLocked(gate string) (string, bool) {
	key := plan.AppliedAnnotationPrefix + gate
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		if !a.invalid[gate] {
			a.invalid[gate] = true
			a.log.Info("Cannot acknowledge a gate whose name does not fit an annotation key",
				"gate", gate, "reason", errs[0])
		}
		return "", false
	}
	return key, true
}

// stop ends every wait and returns once their goroutines have.
func (a *acker) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}

// release writes "<epoch>/released" for every gate in gates, with the epoch
// of its plan in plans, and from then on writes no revision. It retries a
// failed patch with backoff until it succeeds or ctx ends.
func (a *acker) release(ctx context.Context, plans map[string]plan.Document, gates []string) error {
	a.mu.Lock()
	a.released = true
	annotations := map[string]string{}
	for _, gate := range gates {
		d, ok := plans[gate]
		if !ok {
			continue
		}
		if key, ok := a.keyLocked(gate); ok {
			annotations[key] = plan.Ack{Epoch: d.Epoch, Released: true}.String()
		}
	}
	a.mu.Unlock()
	if len(annotations) == 0 {
		return nil
	}
	b := a.backoff
	for {
		err := a.patch(ctx, annotations)
		if err == nil {
			a.metrics.acks.WithLabelValues(ResultSuccess).Inc()
			a.markDone(annotations)
			a.log.Info("Released the shares of the gates", "gates", slices.Sorted(maps.Keys(annotations)))
			return nil
		}
		a.metrics.acks.WithLabelValues(ResultError).Inc()
		if ctx.Err() != nil {
			return fmt.Errorf("reload: release: %w", err)
		}
		delay := b.Step()
		a.log.Error(err, "Could not release the shares; will retry", "retryIn", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("reload: release: %w", err)
		case <-t.C:
		}
	}
}

// run patches the pod whenever the wanted annotations differ from those
// patched last, until ctx ends.
func (a *acker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		b := a.backoff
		for {
			pending := a.pending()
			if len(pending) == 0 {
				break
			}
			err := a.patch(ctx, pending)
			if err == nil {
				a.metrics.acks.WithLabelValues(ResultSuccess).Inc()
				a.markDone(pending)
				b = a.backoff
				continue
			}
			if ctx.Err() != nil {
				return
			}
			a.metrics.acks.WithLabelValues(ResultError).Inc()
			delay := b.Step()
			a.log.Error(err, "Could not acknowledge the applied plans; will retry", "retryIn", delay.Round(time.Millisecond))
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

func (a *acker) pending() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := map[string]string{}
	for k, v := range a.want {
		if a.done[k] != v {
			p[k] = v
		}
	}
	return p
}

func (a *acker) markDone(patched map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	maps.Copy(a.done, patched)
}

// declaredSilent is the pod annotation by which a pod declares whether it
// acknowledges (the operator's v1alpha1.AcknowledgesAnnotation); "false"
// has the operator settle the pod's smaller shares by time, acknowledged
// or not.
const declaredSilent = "backpressure.dev/acknowledges"

// acknowledged reports whether the operator counts on this pod's
// acknowledgement of the gate's smaller shares in epoch: the pod carries an
// acknowledgement of a revision of epoch that this source wrote, and does
// not declare that it does not acknowledge.
func (a *acker) acknowledged(gate, epoch string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ack, err := plan.ParseAck(a.done[plan.AppliedAnnotationPrefix+gate])
	return err == nil && !a.silent && !ack.Released && ack.Epoch == epoch && ack.Revision > 0
}

func (a *acker) patch(ctx context.Context, annotations map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return fmt.Errorf("reload: encode acknowledgement: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	pod, err := a.client.CoreV1().Pods(a.namespace).Patch(ctx, a.pod, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: ackFieldManager})
	if err != nil {
		return fmt.Errorf("reload: patch pod %s/%s: %w", a.namespace, a.pod, err)
	}
	a.mu.Lock()
	a.silent = pod.Annotations[declaredSilent] == "false"
	a.mu.Unlock()
	return nil
}
