package dispatch

import (
	"errors"
	"fmt"
)

// Limits sizes a dispatcher.
type Limits struct {
	// Workers is the most goroutines that run tasks at once. They start as
	// tasks arrive, not all at New or Update, so the limit costs nothing
	// until the load reaches it. Zero runs nothing: tasks wait in the queue
	// until workers are added.
	Workers int
	// QueueCapacity is how many tasks may wait for a busy worker. Zero means
	// a task is accepted only if a worker is idle or may be started.
	QueueCapacity int
}

// Validate reports every value out of range, or nil.
func (l Limits) Validate() error {
	var errs []error
	if l.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d must be >= 0", l.Workers))
	}
	if l.QueueCapacity < 0 {
		errs = append(errs, fmt.Errorf("queue capacity %d must be >= 0", l.QueueCapacity))
	}
	if len(errs) > 0 {
		return fmt.Errorf("dispatch: invalid limits: %w", errors.Join(errs...))
	}
	return nil
}
