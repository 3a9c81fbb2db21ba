package runtime

import "github.com/backpressure-dev/backpressure-operator/internal/reload"

// ErrNoPlan is matched (errors.Is) by the error of New when the source holds
// no valid plan at all, or none for a gate named in Options.Gates or
// Options.Dispatchers.
var ErrNoPlan = reload.ErrNoPlan
