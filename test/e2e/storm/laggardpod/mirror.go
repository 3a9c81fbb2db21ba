//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/internal/podmain"
)

// firstReadTimeout bounds the wait for the ConfigMap's first version: the
// harness starts a pod only once the operator has published its plan.
const firstReadTimeout = time.Minute

// mirror writes the data of a ConfigMap into dir, one file per key, every
// version but the first delay after it arrived.
type mirror struct {
	dir   string
	delay time.Duration
	// written, when not nil, is called after each version is written.
	written func(data map[string]string)
	// keys are the files the last write made.
	keys map[string]bool
}

// version is one version of the ConfigMap's data and when to write it.
type version struct {
	data map[string]string
	at   time.Time
}

// follow watches the ConfigMap ns/name. It writes the first version it
// reads before it returns, then every version that changes the data delay
// after it arrived, in order, until ctx ends; done is closed then. A
// deleted ConfigMap leaves the files as they are, as the kubelet leaves a
// volume whose optional ConfigMap is gone.
func (m *mirror) follow(ctx context.Context, client kubernetes.Interface, ns, name string) (done <-chan struct{}, err error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	informer := factory.Core().V1().ConfigMaps().Informer()
	first := make(chan error, 1)
	queue := make(chan version, 1024)
	var last map[string]string
	seen := false
	// The informer delivers the events of one handler one at a time, in
	// order.
	onData := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		switch {
		case !seen:
			seen, last = true, cm.Data
			first <- m.write(cm.Data)
		case !maps.Equal(cm.Data, last):
			last = cm.Data
			select {
			case queue <- version{data: cm.Data, at: time.Now().Add(m.delay)}:
			case <-ctx.Done():
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onData,
		UpdateFunc: func(_, obj any) { onData(obj) },
	}); err != nil {
		return nil, err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		factory.Start(ctx.Done())
		<-ctx.Done()
		factory.Shutdown()
	}()
	select {
	case err := <-first:
		if err != nil {
			return nil, err
		}
	case <-time.After(firstReadTimeout):
		return nil, fmt.Errorf("laggardpod: ConfigMap %s/%s not read within %v", ns, name, firstReadTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		m.writeLate(ctx, queue)
		<-stopped
	}()
	return finished, nil
}

// writeLate writes each version from queue at its time, in order, until
// ctx ends. A failed write is logged; the next version replaces it.
func (m *mirror) writeLate(ctx context.Context, queue <-chan version) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-queue:
			t := time.NewTimer(time.Until(v.at))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if err := m.write(v.data); err != nil {
				podmain.LogLine("Could not write the plans", err.Error())
			}
		}
	}
}

// write makes dir hold data, key by key, each file renamed into place so
// that the gateway never reads half a document, and removes the files of
// keys data no longer has.
func (m *mirror) write(data map[string]string) error {
	var errs []error
	for key, value := range data {
		tmp := filepath.Join(m.dir, "."+key+".tmp")
		if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.Rename(tmp, filepath.Join(m.dir, key)))
	}
	for key := range m.keys {
		if _, still := data[key]; !still {
			errs = append(errs, os.Remove(filepath.Join(m.dir, key)))
		}
	}
	m.keys = map[string]bool{}
	for key := range data {
		m.keys[key] = true
	}
	if m.written != nil {
		m.written(data)
	}
	return errors.Join(errs...)
}
