package reload

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// ConfigMapSource reads a workload's plans from its ConfigMap through the
// API server and follows every change with an informer restricted to that
// one object, so updates arrive in well under a second.
//
// Every request names the ConfigMap (a get, and a list and watch with the
// field selector metadata.name=<name>), so a Role granting get, list and
// watch on configmaps with resourceNames: [<name>] is enough.
//
// NewConfigMapSource reads once and fails when there is no valid plan
// (unless Options.WaitForPlan is set); Start
// delivers what was read, then follows changes until its context ends. A
// ConfigMap that is deleted later orphans every gate: each keeps its last
// plan. Methods are safe for concurrent use.
type ConfigMapSource struct {
	*core
	client    kubernetes.Interface
	namespace string
	name      string
	live      *liveness
}

// NewConfigMapSource reads the ConfigMap namespace/name with client and
// returns a source holding its valid plans. It returns an error, without
// starting anything, when the ConfigMap cannot be read or holds no valid
// plan (the error then matches ErrNoPlan); invalid documents beside valid
// ones are logged and counted, not fatal. With Options.WaitForPlan it reads
// the ConfigMap until it holds a plan or the wait has passed, each request
// bounded by that deadline, and then returns the source, empty or not: a
// ConfigMap created later, or an API server that answers later, is
// followed by Start's informer.
func NewConfigMapSource(ctx context.Context, client kubernetes.Interface, namespace, name string, opts Options) (*ConfigMapSource, error) {
	if client == nil || namespace == "" || name == "" {
		return nil, fmt.Errorf("reload: NewConfigMapSource needs a client, a namespace and a name")
	}
	c, err := newCore(opts, client)
	if err != nil {
		return nil, err
	}
	s := &ConfigMapSource{core: c, client: client, namespace: namespace, name: name, live: newLiveness()}
	s.log = s.log.WithValues("configMap", namespace+"/"+name)
	s.tracker.log = s.log

	err = s.readFirst(ctx, opts.WaitForPlan, "ConfigMap "+namespace+"/"+name,
		func(ctx context.Context) (map[string]entry, error) {
			cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reload: read ConfigMap %s/%s: %w", namespace, name, err)
			}
			s.live.confirmed()
			return snapshotOf(cm), nil
		})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Confirmed implements Liveness: the source is live while a watch of the
// ConfigMap, started on a read the gates have been given, is open; a list
// or get loaded confirms the moment it was made. A failed list or watch,
// or a watch that ends, leaves the time it was last live. A watch on a
// connection that died silently stays open until the client's HTTP/2
// health check ends it (30s without a frame, then a 15s ping, by default).
func (s *ConfigMapSource) Confirmed() (bool, time.Time) { return s.live.Confirmed() }

// Plans returns the plan in force for every gate, keyed by gate name.
func (s *ConfigMapSource) Plans() map[string]plan.Document { return s.plans() }

// Start delivers the plans read so far to the subscriber, then watches the
// ConfigMap and delivers every change until ctx ends. It starts the
// informer's goroutines and, with acknowledgement on, one more that patches
// the pod; all have stopped when Start returns. Start returns nil when ctx
// ends, and an error when called twice.
func (s *ConfigMapSource) Start(ctx context.Context) error {
	return s.start(ctx, s.watch)
}

func (s *ConfigMapSource) watch(ctx context.Context) {
	selector := fields.OneTermEqualSelector(metav1.ObjectNameField, s.name).String()
	configMaps := s.client.CoreV1().ConfigMaps(s.namespace)
	// The list and watch are those of NewFilteredConfigMapInformer, with
	// the confirmations beside them (see Confirmed). A list is loaded here,
	// before the informer hands it on, so that it confirms only what the
	// gates have; a watch that follows a failure reads the ConfigMap first,
	// as it may resume from a resource version whose changes the informer
	// has still to deliver.
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := configMaps.List(ctx, o)
			if err != nil {
				s.live.failed()
				return nil, err
			}
			snap := map[string]entry{}
			for i := range list.Items {
				if list.Items[i].Name == s.name {
					snap = snapshotOf(&list.Items[i])
				}
			}
			s.load(snap)
			s.live.confirmed()
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := configMaps.Watch(ctx, o)
			if err != nil {
				s.live.failed()
				return nil, err
			}
			if s.live.needsRead() {
				cm, err := configMaps.Get(ctx, s.name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
					s.load(map[string]entry{})
				case err != nil:
					w.Stop()
					s.live.failed()
					return nil, err
				default:
					s.load(snapshotOf(cm))
				}
				s.live.confirmed()
			}
			return s.live.follow(w), nil
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	defer s.live.wg.Wait()
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			s.log.Error(err, "Cannot watch the ConfigMap; keeping the last good plans and retrying")
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	_, err := informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(obj) },
		UpdateFunc: func(_, obj any) { s.observe(obj) },
		DeleteFunc: func(any) {
			s.log.Info("ConfigMap was deleted; every gate keeps its last plan")
			s.load(map[string]entry{})
		},
	}, cache.HandlerOptions{Logger: &s.log})
	if err != nil {
		// Only an informer that has already stopped refuses a handler.
		s.log.Error(err, "Could not watch the ConfigMap")
		<-ctx.Done()
		return
	}
	informer.RunWithContext(ctx)
}

func (s *ConfigMapSource) observe(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != s.name {
		return
	}
	s.load(snapshotOf(cm))
}

func snapshotOf(cm *corev1.ConfigMap) map[string]entry {
	snap := make(map[string]entry, len(cm.Data))
	for k, v := range cm.Data {
		snap[k] = entry{data: v}
	}
	for k := range cm.BinaryData {
		if _, isPlan := plan.GateFromKey(k); isPlan {
			snap[k] = entry{readErr: "plan documents must be in data, not binaryData"}
		}
	}
	return snap
}
