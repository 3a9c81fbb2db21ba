package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

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
	Epoch                 *string  `json:"epoch"`
	Revision              *int64   `json:"revision"`
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
	// Pods is optional; null reads as absent. A null entry stays a nil
	// pointer and is reported as missing its fields. Version 2 only.
	Pods map[string]*wirePodShare `json:"pods"`
	// Holding is optional.
	Holding map[string]int `json:"holding"`
	// UnacknowledgedDelaySeconds is optional: older documents lack it.
	UnacknowledgedDelaySeconds *float64 `json:"unacknowledgedDelaySeconds"`
	// Shares is optional; version 3 only, decoded by groupedPods (a
	// version 2 reader ignores it, as any field it does not know).
	Shares json.RawMessage `json:"shares"`
}

// wireShareGroup is the decoding form of one entry of a version 3
// document's shares: a share and the pods that hold it.
type wireShareGroup struct {
	wirePodShare
	Pods *[]string `json:"pods"`
}

// wirePodShare is the decoding form of PodShare.
type wirePodShare struct {
	Permits              *int     `json:"permits"`
	RatePerSecond        *float64 `json:"ratePerSecond"`
	Burst                *int     `json:"burst"`
	QueueCapacity        *int     `json:"queueCapacity"`
	Workers              *int     `json:"workers"`
	RetryBudgetPerSecond *float64 `json:"retryBudgetPerSecond"`
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
	// fields that this version requires, or mean something else by them.
	if w.Version == nil {
		return Document{}, &FieldError{Field: "version", Detail: "required"}
	}
	if !knownVersion(*w.Version) {
		return Document{}, versionError(*w.Version)
	}
	if *w.Version == CompactVersion {
		if w.Pods != nil {
			return Document{}, &FieldError{Field: "pods", Detail: "not a field of version 3, which lists the pods in shares"}
		}
		pods, err := w.groupedPods()
		if err != nil {
			return Document{}, err
		}
		w.Pods = pods
	}

	var missing []error
	need := func(field string, present bool) {
		if !present {
			missing = append(missing, &FieldError{Field: field, Detail: "required"})
		}
	}
	need("gate", w.Gate != nil)
	need("epoch", w.Epoch != nil)
	need("revision", w.Revision != nil)
	for _, f := range fields {
		if !f.PerPod {
			need(f.Key, !wireField(&w, f).IsNil())
		}
	}
	missing = append(missing, w.share().missing("")...)
	if len(w.Pods) > MaxPods {
		// Too many to be worth reading further.
		return Document{}, podCountError(len(w.Pods))
	}
	var pods map[string]PodShare
	if len(w.Pods) > 0 {
		pods = make(map[string]PodShare, len(w.Pods))
		var incomplete []string
		for name, e := range w.Pods {
			s, ok := e.share()
			if !ok {
				incomplete = append(incomplete, name)
				continue
			}
			pods[name] = s
		}
		// In name order, so that the error is the same whatever order the
		// writer used.
		slices.Sort(incomplete)
		for _, name := range incomplete {
			missing = append(missing, w.Pods[name].missing(podField(name, ""))...)
		}
	}
	if len(missing) > 0 {
		return Document{}, errors.Join(missing...)
	}

	d := Document{
		Version:    int(*w.Version),
		Gate:       *w.Gate,
		Downstream: deref(w.Downstream),
		Hash:       deref(w.Hash),
		Generation: deref(w.Generation),
		Epoch:      *w.Epoch,
		Revision:   *w.Revision,
		Pods:       pods,
		Holding:    w.Holding,

		UnacknowledgedDelaySeconds: deref(w.UnacknowledgedDelaySeconds),
	}
	for _, f := range fields {
		if !f.PerPod {
			f.value(&d, nil).Set(wireField(&w, f).Elem())
		}
	}
	base, _ := w.share().share()
	d.setShare(base)
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

// canonical maps values that compare equal to one encoding: -0 becomes 0,
// and an empty Pods becomes nil (both encode as absent). The caller's Pods
// map is never written: it is copied when an entry needs changing.
func canonical(d Document) Document {
	for _, f := range fields {
		positiveZero(f.topLevel(&d))
	}
	positiveZero(reflect.ValueOf(&d.UnacknowledgedDelaySeconds).Elem())
	if len(d.Holding) == 0 {
		d.Holding = nil
	}
	if len(d.Pods) == 0 {
		d.Pods = nil
		return d
	}
	copied := false
	for name, s := range d.Pods {
		if !hasNegativeZero(s) {
			continue
		}
		if !copied {
			d.Pods = maps.Clone(d.Pods)
			copied = true
		}
		for _, f := range fields {
			if f.PerPod {
				positiveZero(f.value(nil, &s))
			}
		}
		d.Pods[name] = s
	}
	return d
}

// positiveZero turns a float field holding -0 into +0.
func positiveZero(v reflect.Value) {
	if v.Kind() == reflect.Float64 && v.Float() == 0 {
		v.SetFloat(0)
	}
}

func hasNegativeZero(s PodShare) bool {
	for _, f := range fields {
		if !f.PerPod {
			continue
		}
		if v := f.value(nil, &s); v.Kind() == reflect.Float64 && v.Float() == 0 && math.Signbit(v.Float()) {
			return true
		}
	}
	return false
}

// share returns the base share's fields of w as an entry of pods.
func (w *wireDocument) share() *wirePodShare {
	var out wirePodShare
	for _, f := range fields {
		if f.PerPod {
			wireField(&out, f).Set(wireField(w, f))
		}
	}
	return &out
}

// share returns the entry as a PodShare, and false when a field is missing
// (or the entry itself is null).
func (w *wirePodShare) share() (PodShare, bool) {
	var s PodShare
	if w == nil {
		return s, false
	}
	for _, f := range fields {
		if !f.PerPod {
			continue
		}
		p := wireField(w, f)
		if p.IsNil() {
			return PodShare{}, false
		}
		f.value(nil, &s).Set(p.Elem())
	}
	return s, true
}

// missing names each field the entry lacks; prefix is the entry's path,
// "" for the base share.
func (w *wirePodShare) missing(prefix string) []error {
	if w == nil {
		return []error{&FieldError{Field: prefix, Detail: "must be an object with the per-pod fields, got null"}}
	}
	if prefix != "" {
		prefix += "."
	}
	var errs []error
	for _, f := range fields {
		if f.PerPod && wireField(w, f).IsNil() {
			errs = append(errs, &FieldError{Field: prefix + f.Key, Detail: "required"})
		}
	}
	return errs
}

// wireField returns the pointer field of the wire struct *w (a
// *wireDocument or *wirePodShare) that decodes f, found by f's key.
func wireField(w any, f Field) reflect.Value {
	v := reflect.ValueOf(w).Elem()
	return v.Field(wireIndex[v.Type()][f.Key])
}

// wireIndex maps each wire struct's JSON names to field indexes.
var wireIndex = map[reflect.Type]map[string]int{
	reflect.TypeFor[wireDocument](): jsonIndex(reflect.TypeFor[wireDocument]()),
	reflect.TypeFor[wirePodShare](): jsonIndex(reflect.TypeFor[wirePodShare]()),
}

func encode(d Document) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// Gate names cannot hold <, > or &, but downstream may; keep them
	// readable in kubectl output.
	enc.SetEscapeHTML(false)
	var v any = d
	if d.Version == CompactVersion {
		v = compactOf(d)
	}
	if err := enc.Encode(v); err != nil {
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

// compactDocument is the encoding of a version 3 document: the fields of
// version 2 without pods, then shares.
type compactDocument struct {
	Document
	// Shares lists every distinct share of Document.Pods once, largest
	// permits first, with the pods that hold it, sorted.
	Shares []shareGroup `json:"shares,omitempty"`
}

// shareGroup is one share and the pods that hold it.
type shareGroup struct {
	PodShare
	Pods []string `json:"pods"`
}

// compactOf groups d's pods by share.
func compactOf(d Document) compactDocument {
	byShare := map[PodShare][]string{}
	for name, s := range d.Pods {
		byShare[s] = append(byShare[s], name)
	}
	out := compactDocument{Document: d}
	out.Pods = nil
	for s, pods := range byShare {
		slices.Sort(pods)
		out.Shares = append(out.Shares, shareGroup{PodShare: s, Pods: pods})
	}
	slices.SortFunc(out.Shares, func(a, b shareGroup) int {
		if a.Permits != b.Permits {
			return b.Permits - a.Permits
		}
		return strings.Compare(a.Pods[0], b.Pods[0])
	})
	return out
}

// groupedPods reads a version 3 document's shares back into the pods map
// of version 2, so that one validation serves both. A pod named twice, or
// an entry without its fields or pods, is an error naming the entry.
func (w *wireDocument) groupedPods() (map[string]*wirePodShare, error) {
	if len(w.Shares) == 0 || string(w.Shares) == "null" {
		return nil, nil
	}
	var groups []*wireShareGroup
	strictErrs, err := sigsjson.UnmarshalStrict(w.Shares, &groups, sigsjson.DisallowDuplicateFields)
	if err == nil && len(strictErrs) > 0 {
		err = errors.Join(strictErrs...)
	}
	if err != nil {
		return nil, &FieldError{Field: "shares", Detail: fmt.Sprintf("must be a list of shares with their pods: %v", err)}
	}
	pods := map[string]*wirePodShare{}
	var errs []error
	for i, g := range groups {
		field := fmt.Sprintf("shares[%d]", i)
		if g == nil {
			errs = append(errs, &FieldError{Field: field, Detail: "must be an object with the per-pod fields and pods, got null"})
			continue
		}
		if g.Pods == nil {
			errs = append(errs, &FieldError{Field: field + ".pods", Detail: "required"})
			continue
		}
		if _, ok := g.share(); !ok {
			errs = append(errs, g.missing(field)...)
			continue
		}
		for _, name := range *g.Pods {
			if _, dup := pods[name]; dup {
				errs = append(errs, &FieldError{Field: field + ".pods", Detail: fmt.Sprintf("pod %q is named in more than one share", name)})
				continue
			}
			pods[name] = &g.wirePodShare
			if len(pods) > MaxPods {
				return nil, podCountError(len(pods))
			}
		}
	}
	return pods, errors.Join(errs...)
}
