// Package writecount counts the writes a controller-runtime client sends to
// the API server, by verb and kind, so that tests and measurements can
// assert how many writes a controller issues (none, on a reconcile with
// nothing new). Wrap a manager's client with Counter.NewClient.
package writecount

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Counter counts writes. The zero value is ready to use; it is safe for
// concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
	// byNamespace counts writes per namespace of the object written.
	byNamespace map[string]int
}

// NewClient is a client.NewClientFunc: it builds the client the manager
// would, and counts every write through it. Reads pass through uncounted.
func (c *Counter) NewClient(config *rest.Config, options client.Options) (client.Client, error) {
	base, err := client.NewWithWatch(config, options)
	if err != nil {
		return nil, err
	}
	return c.Wrap(base), nil
}

// Wrap returns base with every write through it counted.
func (c *Counter) Wrap(base client.WithWatch) client.WithWatch {
	kind := func(obj runtime.Object) string {
		gvk, err := apiutil.GVKForObject(obj, base.Scheme())
		if err != nil {
			return fmt.Sprintf("%T", obj)
		}
		return gvk.Kind
	}
	return interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			c.add(obj.GetNamespace(), "create "+kind(obj))
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			c.add(obj.GetNamespace(), "update "+kind(obj))
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			c.add(obj.GetNamespace(), "patch "+kind(obj))
			return cl.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			c.add(applyNamespace(obj), "apply "+applyKind(obj))
			return cl.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			c.add(obj.GetNamespace(), "delete "+kind(obj))
			return cl.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			c.add(obj.GetNamespace(), "deleteallof "+kind(obj))
			return cl.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, cl client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			c.add(obj.GetNamespace(), "create "+kind(obj)+"/"+sub)
			return cl.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			c.add(obj.GetNamespace(), "update "+kind(obj)+"/"+sub)
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.add(obj.GetNamespace(), "patch "+kind(obj)+"/"+sub)
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, cl client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			c.add(applyNamespace(obj), "apply "+applyKind(obj)+"/"+sub)
			return cl.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}

// applyKind reads the kind an apply configuration carries.
func applyKind(obj runtime.ApplyConfiguration) string {
	if k, ok := obj.(interface{ GetKind() *string }); ok && k.GetKind() != nil {
		return *k.GetKind()
	}
	return fmt.Sprintf("%T", obj)
}

// applyNamespace reads the namespace an apply configuration carries.
func applyNamespace(obj runtime.ApplyConfiguration) string {
	if n, ok := obj.(interface{ GetNamespace() *string }); ok && n.GetNamespace() != nil {
		return *n.GetNamespace()
	}
	return ""
}

func (c *Counter) add(namespace, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts, c.byNamespace = map[string]int{}, map[string]int{}
	}
	c.counts[key]++
	c.byNamespace[namespace]++
}

// TotalIn returns the number of writes counted to objects of namespace.
func (c *Counter) TotalIn(namespace string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNamespace[namespace]
}

// Counts returns a copy of the counts, keyed "<verb> <Kind>[/<subresource>]",
// such as "apply ConfigMap" or "patch DownstreamQuota/status".
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Total returns the number of writes counted.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// String lists the counts in key order, such as
// "apply ConfigMap=3 patch DownstreamQuota/status=2".
func (c *Counter) String() string {
	counts := c.Counts()
	parts := make([]string, 0, len(counts))
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}
