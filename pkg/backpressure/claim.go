package backpressure

import "errors"

// errGateClaimed is claimGate's error for a gate another process of the
// pod enforces already.
var errGateClaimed = errors.New("enforced by another process of this pod")

// nopCloser is the claim of a gate where nothing is claimed.
type nopCloser struct{}

// Close releases nothing.
func (nopCloser) Close() error { return nil }
