package backpressure

import (
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// The environment variables that name this pod when Options.PodName and
// Options.PodNamespace are empty, set from the downward API (fieldRef
// metadata.name and metadata.namespace).
const (
	EnvPodName      = reload.EnvPodName
	EnvPodNamespace = reload.EnvPodNamespace
)

// AckOptions turn acknowledgement on (Options.Ack): the Runtime annotates
// its own pod with applied.backpressure.dev/<gate>: "<epoch>/<revision>"
// once it enforces that revision within its share, and with
// "<epoch>/released" when Start ends, so that the operator hands capacity
// over only once the pods giving it up have let go of it. The pod is named
// by Options.PodName and Options.PodNamespace; while either is unknown,
// acknowledgement stays off and the Runtime says so in its log. Failed
// patches are logged and retried with backoff; they never stop the Runtime.
// The pod's service account needs patch on pods.
type AckOptions struct {
	// Client patches the pod. Nil means FromConfigMap's client; FromDir
	// requires one.
	Client kubernetes.Interface
	// Backoff paces the retries of a failed patch. A zero Duration means
	// 500ms, doubling up to one minute, with 20% jitter. Steps is ignored:
	// retries go on for as long as the Runtime runs.
	Backoff wait.Backoff
}

// podIdentity returns this pod's name and the acknowledgement options to
// give the source, naming the pod by Options.PodName and
// Options.PodNamespace, or else by POD_NAME and POD_NAMESPACE, so that the
// pod whose share is enforced is the pod that is annotated.
func podIdentity(opts Options) (string, *reload.AckOptions) {
	name := opts.PodName
	if name == "" {
		name = os.Getenv(reload.EnvPodName)
	}
	if opts.Ack == nil {
		return name, nil
	}
	namespace := opts.PodNamespace
	if namespace == "" {
		namespace = os.Getenv(reload.EnvPodNamespace)
	}
	env := map[string]string{reload.EnvPodName: name, reload.EnvPodNamespace: namespace}
	return name, &reload.AckOptions{
		Client:  opts.Ack.Client,
		Backoff: opts.Ack.Backoff,
		Getenv:  func(key string) string { return env[key] },
	}
}
