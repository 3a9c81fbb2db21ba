package backpressure

import (
	"context"
	"errors"

	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// Source names where a Runtime reads its plans. FromDir and FromConfigMap
// make the only two there are; the zero Source names none, and New rejects
// it. A Source is a description: New opens it.
type Source struct {
	open reload.Opener
}

// FromDir reads the plans from a directory, normally the workload's
// ConfigMap mounted as a volume: one file <gate>.json per gate. It watches
// the directory (the kubelet's symlink swap included) and reads it again
// every 10 seconds. Mount the whole ConfigMap, not single files with
// subPath, which the kubelet never updates; and note that the kubelet
// refreshes a mounted ConfigMap only after up to a minute or more.
// Acknowledgement with this source needs AckOptions.Client.
func FromDir(dir string) Source {
	return Source{open: func(_ context.Context, opts reload.Options) (reload.Source, error) {
		return reload.NewDirSource(dir, reload.DirOptions{Options: opts})
	}}
}

// FromConfigMap reads the plans from the ConfigMap namespace/name through the
// API server and follows its changes within a second. A Role granting get,
// list and watch on that one ConfigMap is enough (resourceNames may name
// it); acknowledgement also needs patch on pods, and uses client unless
// AckOptions.Client is set.
func FromConfigMap(client kubernetes.Interface, namespace, name string) Source {
	return Source{open: func(ctx context.Context, opts reload.Options) (reload.Source, error) {
		return reload.NewConfigMapSource(ctx, client, namespace, name, opts)
	}}
}

// errNoSource is New's error for the zero Source.
var errNoSource = errors.New("backpressure: New needs a Source: FromDir or FromConfigMap")
