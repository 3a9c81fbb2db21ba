package reload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/plan"
)

// AppliedAnnotationPrefix prefixes the pod annotation that acknowledges a
// plan: applied.backpressure.dev/<gate>: <hash>. It is the operator API's
// constant of the same name, repeated here so that applications importing
// this package do not import the API types.
const AppliedAnnotationPrefix = "applied.backpressure.dev/"

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

// AckOptions turn acknowledgement on: after each update has been delivered,
// the source patches its own pod (a JSON merge patch) so that the annotation
// applied.backpressure.dev/<gate> carries the hash of every plan in force.
// The operator reads these annotations to tell how far a new plan has rolled
// out. Failed patches are logged and retried with backoff until they
// succeed or the source stops; they never stop the source.
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

// acker keeps the own pod's applied annotations equal to the plans in force.
// set records what should be there; run patches until it is.
type acker struct {
	client    kubernetes.Interface
	namespace string
	pod       string
	log       logr.Logger
	metrics   *metrics
	backoff   wait.Backoff

	kick chan struct{} // capacity 1: "want changed"

	mu      sync.Mutex
	want    map[string]string // annotation key → hash
	done    map[string]string // what the pod is known to carry
	invalid map[string]bool   // gates that cannot form an annotation key, logged once
}

// newAcker returns nil when acknowledgement is off.
func newAcker(opts *AckOptions, fallback kubernetes.Interface, log logr.Logger, m *metrics) (*acker, error) {
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
	return &acker{
		client:    client,
		namespace: ns,
		pod:       pod,
		log:       log.WithValues("pod", ns+"/"+pod),
		metrics:   m,
		backoff:   b,
		kick:      make(chan struct{}, 1),
		want:      map[string]string{},
		done:      map[string]string{},
		invalid:   map[string]bool{},
	}, nil
}

// set records the plans in force; it never blocks.
func (a *acker) set(plans map[string]plan.Document) {
	a.mu.Lock()
	for gate, d := range plans {
		key := AppliedAnnotationPrefix + gate
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			if !a.invalid[gate] {
				a.invalid[gate] = true
				a.log.Info("Cannot acknowledge a gate whose name does not fit an annotation key",
					"gate", gate, "reason", errs[0])
			}
			continue
		}
		a.want[key] = d.Hash
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
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

func (a *acker) patch(ctx context.Context, annotations map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return fmt.Errorf("reload: encode acknowledgement: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	_, err = a.client.CoreV1().Pods(a.namespace).Patch(ctx, a.pod, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: ackFieldManager})
	if err != nil {
		return fmt.Errorf("reload: patch pod %s/%s: %w", a.namespace, a.pod, err)
	}
	return nil
}
