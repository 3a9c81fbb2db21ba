//go:build unix

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagerNamespace is where the manager keeps its leader-election lease.
const ManagerNamespace = "backpressure-system"

// ManagerArgs are the manager's flags: the control plane's kubeconfig,
// leader election on, and no metrics or health listeners, which the
// scenario does not use and which would need free ports.
func ManagerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--leader-elect",
		"--leader-election-namespace", ManagerNamespace,
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0",
	}
}

// StartManager starts the operator's manager, the binary at path, against
// the cluster, as `make run` would run it, logging into
// <OutDir>/manager.log. It stays the cluster's manager (ManagerErr) until a
// scenario replaces it (ReplaceManager); Close stops it gracefully.
func (c *Cluster) StartManager(ctx context.Context, path string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ManagerNamespace}}
	if err := c.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("storm: create namespace %s: %w", ManagerNamespace, err)
	}
	c.logf("Starting the manager")
	c.managerPath = path
	var err error
	c.manager, err = c.StartManagerReplica("manager", nil)
	return err
}

// ManagerErr returns an error when the cluster's manager has exited.
func (c *Cluster) ManagerErr() error {
	if c.manager == nil {
		return nil
	}
	select {
	case <-c.manager.Done():
		return c.manager.Exited()
	default:
		return nil
	}
}

// StartManagerReplica starts one replica of the manager with extra flags,
// logging into <OutDir>/<name>.log, beside the cluster's manager.
func (c *Cluster) StartManagerReplica(name string, onLog func(LogLine), extra ...string) (*Process, error) {
	return c.procs.Start(ProcessSpec{
		Name:    name,
		Path:    c.managerPath,
		Args:    append(ManagerArgs(c.Kubeconfig), extra...),
		LogPath: filepath.Join(c.OutDir, name+".log"),
		OnLog:   onLog,
	})
}

// ReplaceManager stops the cluster's manager, for a scenario that runs
// replicas of its own, and returns the function that gives the cluster a
// manager again afterwards: the scenarios after it need one.
func (c *Cluster) ReplaceManager(scenario string) (restore func() error) {
	if c.manager != nil {
		// SIGTERM releases the lease; how the process ended is of no
		// interest (Terminate kills it when it does not end in time).
		if err := c.manager.Terminate(10 * time.Second); err != nil {
			c.logf("Stopping the manager: %v", err)
		}
		c.manager = nil
	}
	return func() error {
		m, err := c.StartManagerReplica("manager-after-"+scenario, nil)
		c.manager = m
		return err
	}
}

// SupervisedManager is one replica of the manager started again whenever its
// process ends, as the kubelet restarts a container: a manager that loses
// its lease exits, as controller-runtime's managers do.
type SupervisedManager struct {
	c     *Cluster
	name  string
	flags []string
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	cur      *Process
	restarts []time.Time
}

// SuperviseManager starts the replica and its supervision. Stop it.
func (c *Cluster) SuperviseManager(name string, flags ...string) (*SupervisedManager, error) {
	s := &SupervisedManager{c: c, name: name, flags: flags, stop: make(chan struct{}), done: make(chan struct{})}
	p, err := c.StartManagerReplica(name, nil, flags...)
	if err != nil {
		return nil, err
	}
	s.cur = p
	go s.loop()
	return s, nil
}

// restartDelay is the pause before a replica that ended starts again: the
// kubelet's first restart of a container is immediate; a replica that
// cannot reach the API server at start ends again at once.
const restartDelay = 500 * time.Millisecond

func (s *SupervisedManager) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-cur.Done():
		}
		s.c.logf("%s exited (%v); starting it again", cur.Name(), cur.Err())
		select {
		case <-s.stop:
			return
		case <-time.After(restartDelay):
		}
		s.mu.Lock()
		n := len(s.restarts) + 1
		p, err := s.c.StartManagerReplica(fmt.Sprintf("%s-restart-%d", s.name, n), nil, s.flags...)
		if err != nil {
			s.mu.Unlock()
			s.c.logf("Starting %s again: %v", s.name, err)
			return
		}
		s.cur = p
		s.restarts = append(s.restarts, time.Now())
		s.mu.Unlock()
	}
}

// Restarts returns when the replica was started again.
func (s *SupervisedManager) Restarts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restarts)
}

// Stop ends the supervision and the replica.
func (s *SupervisedManager) Stop() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.cur.Terminate(10 * time.Second)
}
