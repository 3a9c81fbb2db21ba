// Command devcluster runs a local control plane to try the operator on:
// kube-apiserver and etcd (envtest, from hack/setup-envtest.sh's cache) and
// kube-controller-manager with the Deployment, ReplicaSet, StatefulSet,
// HPA, garbage-collector and EndpointSlice controllers, as the storm runs
// them. No scheduler or kubelet runs: test/e2e/cmd/pods plays them.
//
// It writes the admin kubeconfig to <dir>/kubeconfig once everything runs,
// and the controller manager's log beside it, then runs until SIGTERM or
// Ctrl-C, when it stops everything it started and removes the kubeconfig.
// hack/dev-cluster.sh (make dev-cluster) starts it in the background,
// installs the CRDs and the admission policies, and stops it.
//
//	go run ./test/e2e/cmd/devcluster -dir _output/dev-cluster
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/backpressure-dev/backpressure-operator/internal/testenv"
	"github.com/backpressure-dev/backpressure-operator/test/e2e/storm/cluster"
)

func main() {
	dir := flag.String("dir", filepath.Join("_output", "dev-cluster"), "directory for the kubeconfig and the logs")
	flag.Parse()
	// A session of its own, so that a Ctrl-C in the terminal that started
	// it in the background does not reach it, nor the processes it starts.
	// A process that leads its group already (started from an interactive
	// shell's prompt) cannot, and need not.
	_, _ = syscall.Setsid()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// A kubeconfig left by a cluster that was killed names a stopped API
	// server: it goes before anything starts, so that it is never taken
	// for this one's.
	if err := os.Remove(kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	env, err := testenv.New()
	if err != nil {
		return err
	}
	// hack/dev-cluster.sh applies the CRDs with kubectl, as a user does.
	env.CRDDirectoryPaths, env.ErrorIfCRDPathMissing = nil, false
	start := time.Now()
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver and etcd: %w", err)
	}
	procs := &cluster.Processes{}
	defer func() {
		procs.StopAll()
		err = errors.Join(err, env.Stop(), removeIfExists(kubeconfig))
	}()
	kcm, err := cluster.StartControllerManager(env, procs, dir)
	if err != nil {
		return err
	}
	// The kubeconfig appears whole, and last: hack/dev-cluster.sh waits
	// for it.
	tmp := kubeconfig + ".tmp"
	if err := os.WriteFile(tmp, env.KubeConfig, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, kubeconfig); err != nil {
		return err
	}
	fmt.Printf("devcluster: kube-apiserver %s, etcd and kube-controller-manager run (started in %s); kubeconfig %s\n",
		env.Config.Host, time.Since(start).Round(100*time.Millisecond), kubeconfig)
	select {
	case <-ctx.Done():
		fmt.Println("devcluster: stopping")
		return nil
	case <-kcm.Done():
		return fmt.Errorf("kube-controller-manager exited: %w; its last lines:\n%s", kcm.Exited(), kcm.Tail())
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
