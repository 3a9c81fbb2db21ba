package observe

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/backpressure-dev/backpressure-operator/api/v1alpha1"
)

// Contract follows a DownstreamContract's split over its callers. It is
// safe for concurrent use.
type Contract struct {
	mu     sync.Mutex
	status *v1alpha1.DownstreamContractStatus
}

// Watch records the status of the contract name until ctx ends.
func (o *Contract) Watch(ctx context.Context, c client.WithWatch, name string) {
	watchLoop(ctx, c, &v1alpha1.DownstreamContractList{}, []client.ListOption{client.MatchingFields{"metadata.name": name}}, func(obj client.Object) {
		if dc, ok := obj.(*v1alpha1.DownstreamContract); ok {
			o.mu.Lock()
			o.status = dc.Status.DeepCopy()
			o.mu.Unlock()
		}
	})
}

// Parts returns the callers' parts by namespace/quota.
func (o *Contract) Parts() map[string]int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int32{}
	if o.status != nil {
		for _, c := range o.status.Callers {
			out[c.Namespace+"/"+c.Quota] = c.Permits
		}
	}
	return out
}

// Last returns the last status seen, nil before the first.
func (o *Contract) Last() *v1alpha1.DownstreamContractStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.status.DeepCopy()
}
