package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
)

// wireDocument is the decoding form of Document: a nil pointer tells a
// missing (or null) field from a zero one.
type wireDocument struct {
	Version               *int64   `json:"version"`
	Gate                  *string  `json:"gate"`
	Downstream            *string  `json:"downstream"`
	Hash                  *string  `json:"hash"`
	Generation            *int64   `json:"generation"`
	Permits               *int     `json:"permits"`
	RatePerSecond         *float64 `json:"ratePerSecond"`
	Burst                 *int     `json:"burst"`
	QueueCapacity         *int     `json:"queueCapacity"`
	MaxQueueWaitSeconds   *float64 `json:"maxQueueWaitSeconds"`
	AcquireTimeoutSeconds *float64 `json:"acquireTimeoutSeconds"`
	LatencySeconds        *float64 `json:"latencySeconds"`
	DeadlineSeconds       *float64 `json:"deadlineSeconds"`
	Workers               *int     `json:"workers"`
	RetryBudgetPerSecond  *float64 `json:"retryBudgetPerSecond"`
}

// Parse decodes and validates one document. It rejects malformed JSON, a
// field given twice, a missing required field, a version other than
// CurrentVersion (the error matches ErrUnsupportedVersion) and every value
// Validate rejects; errors name the field. Unknown fields are ignored (see
// the package documentation). An empty hash is filled with Hash of the
// content, so every parsed document carries an identifier.
func Parse(data []byte) (Document, error) {
	var w wireDocument
	strictErrs, err := sigsjson.UnmarshalStrict(data, &w, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return Document{}, fmt.Errorf("plan: malformed document: %w", err)
	}
	if len(strictErrs) > 0 {
		return Document{}, fmt.Errorf("plan: malformed document: %w", errors.Join(strictErrs...))
	}
	// The version decides how to read everything else, so it is checked
	// alone first: a document of another major version may well lack
	// fields that version 1 requires.
	if w.Version == nil {
		return Document{}, &FieldError{Field: "version", Detail: "required"}
	}
	if *w.Version != CurrentVersion {
		return Document{}, versionError(*w.Version)
	}

	var missing []error
	need := func(field string, present bool) {
		if !present {
			missing = append(missing, &FieldError{Field: field, Detail: "required"})
		}
	}
	need("gate", w.Gate != nil)
	need("permits", w.Permits != nil)
	need("ratePerSecond", w.RatePerSecond != nil)
	need("burst", w.Burst != nil)
	need("queueCapacity", w.QueueCapacity != nil)
	need("maxQueueWaitSeconds", w.MaxQueueWaitSeconds != nil)
	need("acquireTimeoutSeconds", w.AcquireTimeoutSeconds != nil)
	need("latencySeconds", w.LatencySeconds != nil)
	need("deadlineSeconds", w.DeadlineSeconds != nil)
	need("workers", w.Workers != nil)
	need("retryBudgetPerSecond", w.RetryBudgetPerSecond != nil)
	if len(missing) > 0 {
		return Document{}, errors.Join(missing...)
	}

	d := Document{
		Version:               CurrentVersion,
		Gate:                  *w.Gate,
		Downstream:            deref(w.Downstream),
		Hash:                  deref(w.Hash),
		Generation:            deref(w.Generation),
		Permits:               *w.Permits,
		RatePerSecond:         *w.RatePerSecond,
		Burst:                 *w.Burst,
		QueueCapacity:         *w.QueueCapacity,
		MaxQueueWaitSeconds:   *w.MaxQueueWaitSeconds,
		AcquireTimeoutSeconds: *w.AcquireTimeoutSeconds,
		LatencySeconds:        *w.LatencySeconds,
		DeadlineSeconds:       *w.DeadlineSeconds,
		Workers:               *w.Workers,
		RetryBudgetPerSecond:  *w.RetryBudgetPerSecond,
	}
	if err := Validate(d); err != nil {
		return Document{}, err
	}
	d = canonical(d)
	if d.Hash == "" {
		d.Hash = Hash(d)
	}
	return d, nil
}

// Marshal encodes a valid document in the wire format, every field present,
// in a fixed order, without a trailing newline; the same document always
// encodes to the same bytes. It returns Validate's error for an invalid
// document, so a writer cannot publish what readers would reject. Marshal
// does not fill the hash: set it first with d.Hash = Hash(d).
func Marshal(d Document) ([]byte, error) {
	if err := Validate(d); err != nil {
		return nil, err
	}
	return encode(canonical(d))
}

// Hash returns the content hash of d: the first 32 hex characters (128 bits)
// of the SHA-256 of Marshal's encoding of d with hash set to "" and
// generation to 0. Equal plans hash equally whatever their generation.
func Hash(d Document) string {
	d.Hash = ""
	d.Generation = 0
	b, err := encode(canonical(d))
	if err != nil {
		// Only NaN or Inf make encoding fail; hash their text so distinct
		// invalid documents still differ. Validate rejects them anyway.
		b = fmt.Appendf(nil, "%#v", d)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// canonical maps values that compare equal to one encoding: -0 becomes 0.
func canonical(d Document) Document {
	for _, f := range []*float64{
		&d.RatePerSecond, &d.MaxQueueWaitSeconds, &d.AcquireTimeoutSeconds,
		&d.LatencySeconds, &d.DeadlineSeconds, &d.RetryBudgetPerSecond,
	} {
		if *f == 0 {
			*f = 0
		}
	}
	return d
}

func encode(d Document) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Gate names cannot hold <, > or &, but downstream may; keep them
	// readable in kubectl output.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("plan: encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
