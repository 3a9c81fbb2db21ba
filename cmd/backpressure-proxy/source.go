package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime"
)

// planSource returns where the plans come from, the library's two sources,
// and the acknowledgement options when --acknowledge is on.
func planSource(c config) (runtime.Source, *runtime.AckOptions, error) {
	var client kubernetes.Interface
	if c.configMap != "" || c.acknowledge {
		cfg, err := restConfig(c.kubeconfig)
		if err != nil {
			return runtime.Source{}, nil, fmt.Errorf("kubernetes client config: %w", err)
		}
		cfg.UserAgent = "backpressure-proxy"
		if client, err = kubernetes.NewForConfig(cfg); err != nil {
			return runtime.Source{}, nil, err
		}
	}
	var ack *runtime.AckOptions
	if c.acknowledge {
		ack = &runtime.AckOptions{Client: client}
	}
	if c.configMap != "" {
		return runtime.FromConfigMap(client, c.namespace, c.configMap), ack, nil
	}
	return runtime.FromDir(c.planDir), ack, nil
}

// restConfig reads the kubeconfig at path, or the in-cluster config without
// one.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", path)
}
