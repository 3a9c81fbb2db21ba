package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// AppliedAnnotationPrefix prefixes the pod annotation by which a pod
// acknowledges a gate's plan: applied.backpressure.dev/<gate>: Ack.String().
// The library writes it on its own pod; the operator reads it before it
// hands capacity over.
const AppliedAnnotationPrefix = "applied.backpressure.dev/"

// releasedWord is the revision part of a release acknowledgement.
const releasedWord = "released"

// Ack is a pod's acknowledgement of a gate's plan, the value of its applied
// annotation (applied.backpressure.dev/<gate>).
//
// An Ack with Released false says that the pod has applied the document of
// Revision in Epoch and that its calls in flight on that gate are within
// the permits that revision gives it: a smaller share is acknowledged only
// once the calls in flight have dropped to it, a larger or equal one at
// once. Acknowledging a revision says nothing about later ones.
//
// An Ack with Released true (Revision is then 0) says that the pod is
// shutting down, its gate admits nothing ever again and nothing is in
// flight on it: the pod has handed its share back.
type Ack struct {
	// Epoch is the document's epoch.
	Epoch string
	// Revision is the acknowledged revision, at least 1; 0 when Released.
	Revision int64
	// Released marks a pod that has handed its share back.
	Released bool
}

// AckFor returns the acknowledgement of d: its epoch and revision.
func AckFor(d Document) Ack { return Ack{Epoch: d.Epoch, Revision: d.Revision} }

// String returns the annotation value: "<epoch>/<revision>", or
// "<epoch>/released" when a.Released.
func (a Ack) String() string {
	if a.Released {
		return a.Epoch + "/" + releasedWord
	}
	return a.Epoch + "/" + strconv.FormatInt(a.Revision, 10)
}

// ParseAck reads an annotation value written by Ack.String. It rejects
// anything else, naming the problem: a missing or extra "/", an epoch that
// Validate would reject, or a revision that is not "released" or a decimal
// integer of at least 1 without sign or leading zeros (so that every Ack
// has exactly one spelling).
func ParseAck(s string) (Ack, error) {
	epoch, rev, ok := strings.Cut(s, "/")
	if !ok {
		return Ack{}, fmt.Errorf("plan: acknowledgement %q: want <epoch>/<revision> or <epoch>/released", s)
	}
	if why := validEpoch(epoch); why != "" {
		return Ack{}, fmt.Errorf("plan: acknowledgement %q: epoch %s", s, why)
	}
	if rev == releasedWord {
		return Ack{Epoch: epoch, Released: true}, nil
	}
	n, err := strconv.ParseInt(rev, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != rev {
		return Ack{}, fmt.Errorf("plan: acknowledgement %q: revision must be %q or an integer of at least 1 written in decimal without sign or leading zeros, got %q",
			s, releasedWord, rev)
	}
	return Ack{Epoch: epoch, Revision: n}, nil
}
