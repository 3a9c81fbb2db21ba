package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime"
	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/reload"
)

// planSource returns where the plans come from, and the acknowledgement
// options when --acknowledge is on.
func planSource(c config) (runtime.Source, *reload.AckOptions, error) {
	var client kubernetes.Interface
	if c.configMap != "" || c.acknowledge {
		var err error
		if client, err = kubeClient(c.kubeconfig); err != nil {
			return nil, nil, err
		}
	}
	var ack *reload.AckOptions
	if c.acknowledge {
		ack = &reload.AckOptions{Client: client}
	}
	if c.configMap != "" {
		return runtime.FromConfigMap(client, c.namespace, c.configMap), ack, nil
	}
	return runtime.FromDir(c.planDir), ack, nil
}

// kubeClient connects with the kubeconfig at path, or in-cluster without one.
func kubeClient(path string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "backpressure-example-gateway"
	return kubernetes.NewForConfig(cfg)
}
