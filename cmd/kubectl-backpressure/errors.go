package main

import (
	"errors"
	"fmt"

	"github.com/backpressure-dev/backpressure-operator/internal/sizing"
)

// flagError renames sizing's input in an *InputError to the flag that gave
// it, using inputFlags (input name → flag name).
func flagError(err error, inputFlags map[string]string) error {
	var ie *sizing.InputError
	if errors.As(err, &ie) {
		if flag, ok := inputFlags[ie.Input]; ok {
			return fmt.Errorf("--%s: %s", flag, ie.Problem)
		}
	}
	return err
}
