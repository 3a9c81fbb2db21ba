//go:build unix

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// keepAPIServerCerts gives the API server a certificate directory of the
// harness's own, and a short grace to stop. envtest otherwise makes a temporary one, removes it when
// the API server stops and makes a new serving CA when it starts again, so
// that the kubeconfig every process holds would no longer trust it. With a
// directory that outlives the process, a restart keeps the serving
// certificate, the port and the client CA, as a kube-apiserver restarted on
// its node keeps its files.
func (c *Cluster) keepAPIServerCerts() error {
	dir, err := os.MkdirTemp("", "storm-apiserver-")
	if err != nil {
		return fmt.Errorf("storm: API server certificate directory: %w", err)
	}
	c.certDir = dir
	c.env.ControlPlane.GetAPIServer().CertDir = dir
	c.env.ControlPlaneStopTimeout = apiServerStopGrace
	return nil
}

// apiServerStopGrace is how long a stopping kube-apiserver (or etcd) may
// take before it is killed. Its graceful shutdown waits for the requests in
// flight, and the open watches of the manager and of every pod keep it
// waiting past envtest's 20 s; a restart is a stop of its process either
// way.
const apiServerStopGrace = 2 * time.Second

// removeAPIServerCerts removes the directory of keepAPIServerCerts once the
// API server has stopped for good.
func (c *Cluster) removeAPIServerCerts() {
	if c.certDir == "" {
		return
	}
	if err := os.RemoveAll(c.certDir); err != nil {
		c.logf("Removing the API server's certificates: %v", err)
	}
}

// RestartAPIServer stops kube-apiserver (SIGTERM, and SIGKILL after
// apiServerStopGrace), leaves it down for down, and starts it again
// with the same flags, port, certificates and etcd. It returns once the API
// server answers /healthz again, with the moments it went down and came
// back. Every client keeps its kubeconfig: watches break and must resume.
func (c *Cluster) RestartAPIServer(down time.Duration) (stopped, back time.Time, err error) {
	if c.env == nil || c.env.ControlPlane.APIServer == nil {
		return time.Time{}, time.Time{}, errors.New("storm: the control plane is not started")
	}
	api := c.env.ControlPlane.APIServer
	addr := net.JoinHostPort(api.Address, api.Port)
	stopped = time.Now()
	// An error here is the grace running out: the process was killed.
	if err := api.Stop(); err != nil {
		c.logf("Stopping kube-apiserver: %v", err)
	}
	// Killed, it may take a moment to release its port.
	if err := WaitFor(context.Background(), 10*time.Second, "kube-apiserver releasing "+addr, func() (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return true, nil
		}
		_ = conn.Close()
		return false, nil
	}); err != nil {
		return stopped, time.Time{}, err
	}
	time.Sleep(down)
	if err := api.Start(); err != nil {
		return stopped, time.Time{}, fmt.Errorf("storm: start kube-apiserver again: %w", err)
	}
	return stopped, time.Now(), nil
}
