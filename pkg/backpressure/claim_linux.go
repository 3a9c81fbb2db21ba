//go:build linux

package backpressure

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"syscall"
)

// claimGate claims the enforcement of gate in this pod: it listens on an
// abstract Unix socket named after the pod and the gate. The containers of
// a pod share its network namespace, and abstract sockets belong to it, so
// a second process of the pod (a sidecar proxy beside the library, two
// containers of one image) that enforces the same gate finds the name
// taken. The listener accepts nothing; closing it gives the gate up. An
// error other than the name being taken leaves the gate unclaimed and
// unchecked.
func claimGate(namespace, pod, gate string) (io.Closer, error) {
	sum := sha256.Sum256([]byte(namespace + "/" + pod + "/" + gate))
	l, err := net.Listen("unix", "@backpressure.dev/gate/"+hex.EncodeToString(sum[:16]))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, errGateClaimed
	case err != nil:
		return nopCloser{}, nil
	}
	return l, nil
}
