//go:build !linux

package backpressure

import "io"

// claimGate claims nothing where abstract Unix sockets do not exist: two
// enforcers of one gate in one pod go undetected.
func claimGate(namespace, pod, gate string) (io.Closer, error) { return nopCloser{}, nil }
