package plan

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Bounds of the numeric fields. A pod allocates in proportion to permits,
// workers and its waiting room, so those are bounded by what one pod can
// sensibly hold; rates and durations by what the DownstreamQuota API
// accepts. The API's maximums (the +kubebuilder markers of api/v1alpha1)
// are these numbers, and a test holds them equal, so nothing the operator
// publishes is refused here and nothing refused here can be published.
const (
	// MaxPermits bounds permits and workers: a gate counts at most 2²⁰−1
	// calls in flight (gate.MaxPermits), and a dispatcher runs one
	// goroutine per worker. It is also the largest contract concurrency
	// the API accepts.
	MaxPermits = 1<<20 - 1
	// MaxQueueCapacity bounds the waiting room of a pod.
	MaxQueueCapacity = MaxPermits
	// MaxBurst bounds burst; it is also the API's largest contract burst.
	MaxBurst = 1_000_000_000
	// MaxPerSecond bounds ratePerSecond and retryBudgetPerSecond; it is
	// also the API's largest rate, demand and retry budget.
	MaxPerSecond = 1_000_000_000
	// MaxSeconds bounds the duration fields: one hour, the API's largest
	// latency, deadline, queue wait and acquire timeout. A call that may
	// wait longer than that for one downstream is not being protected.
	MaxSeconds = 60 * 60
)

// Unit is what a numeric field of a document measures.
type Unit string

const (
	// UnitCount is a whole number of calls, tokens or goroutines.
	UnitCount Unit = "count"
	// UnitPerSecond is a rate in calls per second, a finite number.
	UnitPerSecond Unit = "per second"
	// UnitSeconds is a duration in seconds, a finite number.
	UnitSeconds Unit = "seconds"
)

// Field describes one numeric field of a document: the plan model's single
// table. Validate checks every field against it, Parse requires every field
// it lists, the bounds reference (docs/reference/plan-bounds.md) is
// generated from it, and tests hold the operator's status and document
// builders and the API's maximums to it. Adding a per-pod number means
// adding it to PodShare (or Document, for a shared one) and a row here;
// tests fail until every layer carries it.
type Field struct {
	// Key is the field's JSON name in the document and in each pods entry.
	Key string
	// Unit is what the field measures.
	Unit Unit
	// PerPod is true for the fields of PodShare: the base share at the top
	// level and each pod's own in pods. Other fields are shared by every
	// pod and appear only at the top level.
	PerPod bool
	// Max is the largest value accepted; the smallest is always 0.
	Max float64
	// Rule states the checks beyond [0, Max] that involve other fields, or
	// "" when there are none.
	Rule string
	// Meaning says what a pod does with the value.
	Meaning string
	// Derived says how the operator computes it.
	Derived string

	// index is the field's position in PodShare (PerPod) or Document;
	// top is its position in Document (the base share, for PerPod).
	index, top int
}

// fields lists every numeric field of a document, per-pod fields first, in
// the order of PodShare and then of Document.
var fields = []Field{
	{
		Key: "permits", Unit: UnitCount, PerPod: true, Max: MaxPermits,
		Rule:    "0 admits nobody: workers, queueCapacity, ratePerSecond, burst and retryBudgetPerSecond must then be 0",
		Meaning: "calls the gate admits in flight at once",
		Derived: "floor(usable / pods), one more for usable mod pods of them",
	},
	{
		Key: "ratePerSecond", Unit: UnitPerSecond, PerPod: true, Max: MaxPerSecond,
		Meaning: "token-bucket refill rate; 0 is no rate limit",
		Derived: "usable rate × permits / permits in use",
	},
	{
		Key: "burst", Unit: UnitCount, PerPod: true, Max: MaxBurst,
		Rule:    "at least 1 when ratePerSecond > 0, else 0",
		Meaning: "token-bucket size",
		Derived: "max(1, floor(usable burst × permits / permits in use))",
	},
	{
		Key: "queueCapacity", Unit: UnitCount, PerPod: true, Max: MaxQueueCapacity,
		Meaning: "calls that may wait for a permit",
		Derived: "floor(permits × maxQueueWait / latency), at most the bound; with a reserve, floor((permits + reserve lent) × maxQueueWait / latency) for a pod with permits",
	},
	{
		Key: "workers", Unit: UnitCount, PerPod: true, Max: MaxPermits,
		Rule:    "at most permits",
		Meaning: "dispatcher goroutines",
		Derived: "min(permits, ceil(demand / pods × latency)); permits without a demand",
	},
	{
		Key: "retryBudgetPerSecond", Unit: UnitPerSecond, PerPod: true, Max: MaxPerSecond,
		Meaning: "retries per second the pod may spend",
		Derived: "usable retry budget × permits / permits in use",
	},
	{
		Key: "maxQueueWaitSeconds", Unit: UnitSeconds, Max: MaxSeconds,
		Meaning: "longest a call waits in the waiting room",
		Derived: "spec.maxQueueWait, at most deadline − latency; (deadline − latency) / 2 when absent",
	},
	{
		Key: "acquireTimeoutSeconds", Unit: UnitSeconds, Max: MaxSeconds,
		Meaning: "longest a caller waits for a permit",
		Derived: "min(spec.acquireTimeout, maxQueueWait)",
	},
	{
		Key: "latencySeconds", Unit: UnitSeconds, Max: MaxSeconds,
		Meaning: "a call whose deadline leaves less is shed at once; 0 turns the check off",
		Derived: "spec.latency.typical",
	},
	{
		Key: "deadlineSeconds", Unit: UnitSeconds, Max: MaxSeconds,
		Meaning: "the per-hop deadline the plan was sized for",
		Derived: "spec.deadline",
	},
}

// Fields returns every numeric field of a document, per-pod fields first,
// in the order of PodShare and then of Document.
func Fields() []Field { return slices.Clone(fields) }

func init() {
	share, doc := jsonIndex(reflect.TypeFor[PodShare]()), jsonIndex(reflect.TypeFor[Document]())
	for i := range fields {
		f := &fields[i]
		position[f.Key] = i
		idx := doc
		if f.PerPod {
			idx = share
		}
		var ok bool
		f.index, ok = idx[f.Key]
		if top, inDoc := doc[f.Key]; ok && inDoc {
			f.top = top
			continue
		}
		panic(fmt.Sprintf("plan: fields names %q, which is not a field of Document and, per pod, of PodShare", f.Key))
	}
}

// fieldSet holds one bit per row of fields.
type fieldSet uint64

// has reports whether the set holds every field named by keys.
func (s fieldSet) has(keys ...string) bool {
	for _, k := range keys {
		if s&(1<<position[k]) == 0 {
			return false
		}
	}
	return true
}

// position maps a key to its row in fields.
var position = map[string]int{}

// jsonIndex maps each field's JSON name to its index in t.
func jsonIndex(t reflect.Type) map[string]int {
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = i
	}
	return out
}

// value returns the field's value in s (per-pod fields) or d (the others).
func (f Field) value(d *Document, s *PodShare) reflect.Value {
	if f.PerPod {
		return reflect.ValueOf(s).Elem().Field(f.index)
	}
	return reflect.ValueOf(d).Elem().Field(f.index)
}

// topLevel returns the field's value at the top level of d.
func (f Field) topLevel(d *Document) reflect.Value {
	return reflect.ValueOf(d).Elem().Field(f.top)
}

// check reports, through bad, a value outside [0, Max], named prefix+Key,
// and returns whether the value is in range.
func (f Field) check(prefix string, v reflect.Value, bad func(field, format string, args ...any)) bool {
	if v.CanInt() {
		if n := v.Int(); n < 0 || float64(n) > f.Max {
			bad(prefix+f.Key, "must be in [0, %d], got %d", int64(f.Max), n)
			return false
		}
		return true
	}
	x := v.Float()
	if inRange(x, f.Max) {
		return true
	}
	switch f.Unit {
	case UnitSeconds:
		bad(prefix+f.Key, "must be a number of seconds in [0, %d], got %v", int64(f.Max), x)
	default:
		bad(prefix+f.Key, "must be a number in [0, %d], got %v", int64(f.Max), x)
	}
	return false
}

// inRange reports whether v is a finite number in [0, upper]; NaN fails
// every comparison and so fails here too.
func inRange(v, upper float64) bool {
	return v >= 0 && v <= upper && !math.IsInf(v, 0)
}
