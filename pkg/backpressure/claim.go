package backpressure

import "errors"

// errGateClaimed is claimGate's error for a gate another process of the
// pod enforces already.
var errGateClaimed = errors.New("enforced by another process of this pod")

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
