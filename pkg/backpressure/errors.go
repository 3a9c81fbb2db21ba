package backpressure

import (
	"errors"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/reload"
)

// ErrNoPlan is matched (errors.Is) by the error of New when the source holds
// no valid plan at all, or none for a gate named in Options.Gates or
// Options.Dispatchers, and by the error of Gate, Budget, Dispatcher and Share
// for a name the Runtime has no plan for.
var ErrNoPlan = errors.New("backpressure: no valid plan document")

// noPlan marks an error of the source that found no plan as ErrNoPlan,
// keeping the source's own text, which says where it looked.
type noPlan struct{ error }

// Is makes errors.Is(e, ErrNoPlan) true.
func (e noPlan) Is(target error) bool { return target == ErrNoPlan }

// Unwrap returns the source's error.
func (e noPlan) Unwrap() error { return e.error }

// sourceError returns err, the error of opening a source, matching ErrNoPlan
// when the source found no plan.
func sourceError(err error) error {
	if errors.Is(err, reload.ErrNoPlan) {
		return noPlan{err}
	}
	return err
}
