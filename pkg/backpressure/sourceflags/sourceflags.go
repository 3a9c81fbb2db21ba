// Package sourceflags is the part of a program's command line that says
// where the pod's plans come from — a ConfigMap read through the API, or a
// mounted directory — and whether the pod acknowledges them: the flags of
// the sidecar proxy and of the example gateway, for any application that
// wants the same command line.
//
//	var sf sourceflags.Flags
//	sf.Register(flag.CommandLine, os.Getenv)
//	flag.Parse()
//	if err := errors.Join(sf.Check()...); err != nil { ... }
//	src, ack, err := sf.Open("my-service")
//	rt, err := backpressure.New(ctx, src, backpressure.Options{Ack: ack, ...})
package sourceflags

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

// Flags are --configmap, --namespace, --kubeconfig, --plan-dir and
// --acknowledge.
type Flags struct {
	ConfigMap   string
	Namespace   string
	Kubeconfig  string
	PlanDir     string
	Acknowledge bool
}

// Register defines the flags on fs; getenv supplies --namespace's default,
// the pod's namespace from the downward API.
func (f *Flags) Register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.ConfigMap, "configmap", "", "read the plans from this ConfigMap through the API")
	fs.StringVar(&f.Namespace, "namespace", getenv(backpressure.EnvPodNamespace), "namespace of the ConfigMap (default $"+backpressure.EnvPodNamespace+")")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig for the API (default: in-cluster config)")
	fs.StringVar(&f.PlanDir, "plan-dir", "", "read the plans from a mounted directory (one <gate>.json per gate) instead of --configmap")
	fs.BoolVar(&f.Acknowledge, "acknowledge", false, "annotate the own pod ($"+backpressure.EnvPodName+", $"+backpressure.EnvPodNamespace+") with applied.backpressure.dev/<quota>: <epoch>/<revision> once its share is enforced, and <epoch>/released on shutdown")
}

// Check returns the mistakes in the flags: none or one source, or a
// ConfigMap without a namespace.
func (f *Flags) Check() []error {
	switch {
	case (f.ConfigMap == "") == (f.PlanDir == ""):
		return []error{errors.New("exactly one of --configmap and --plan-dir is required")}
	case f.ConfigMap != "" && f.Namespace == "":
		return []error{errors.New("--configmap needs --namespace or $" + backpressure.EnvPodNamespace)}
	}
	return nil
}

// Open returns the source the flags name and, with --acknowledge, the
// acknowledgement options. It connects to the API only when one of them
// needs it, as userAgent.
func (f *Flags) Open(userAgent string) (backpressure.Source, *backpressure.AckOptions, error) {
	var client kubernetes.Interface
	if f.ConfigMap != "" || f.Acknowledge {
		cfg, err := restConfig(f.Kubeconfig)
		if err != nil {
			return backpressure.Source{}, nil, fmt.Errorf("kubernetes client config: %w", err)
		}
		cfg.UserAgent = userAgent
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return backpressure.Source{}, nil, err
		}
	}
	var ack *backpressure.AckOptions
	if f.Acknowledge {
		ack = &backpressure.AckOptions{Client: client}
	}
	if f.ConfigMap != "" {
		return backpressure.FromConfigMap(client, f.Namespace, f.ConfigMap), ack, nil
	}
	return backpressure.FromDir(f.PlanDir), ack, nil
}

// restConfig reads the kubeconfig at path, or the in-cluster config without
// one.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
