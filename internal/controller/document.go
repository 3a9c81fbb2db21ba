package controller

import (
	"github.com/backpressure-dev/backpressure-operator/api/plan"
)

// currentDocument reports whether data is a valid document whose content
// hashes to hash, so that publishing a plan of that hash would change
// nothing a reader enforces. The hash is recomputed rather than trusted, so
// a hand-edited value is put back.
func currentDocument(data, hash string) bool {
	if data == "" {
		return false
	}
	d, err := plan.Parse([]byte(data))
	return err == nil && d.Hash == hash && plan.Hash(d) == hash
}
