package plan

import (
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// CurrentVersion is the major version of the document this package writes
// by default. Version 2 gives every pod its own share (Document.Pods) and
// identifies each published division by epoch and revision.
const CurrentVersion = 2

// CompactVersion is the major version that carries the same content as
// version 2 with the pods grouped by share ("shares": every distinct share
// once, with the names of the pods that hold it), about a quarter of the
// size for many pods: the operator writes it only when a version 2
// document would not fit in its ConfigMap. Readers of this package read
// both; older readers reject it and keep their last plan.
const CompactVersion = 3

// KeySuffix ends every plan key in the ConfigMap and every plan file in a
// mounted volume.
const KeySuffix = ".json"

// Bounds of the fields that are not numbers of the plan; the numeric ones
// are in fields.go.
const (
	// MaxGateLength bounds the gate name so that KeyFor(gate) is a valid
	// ConfigMap key (at most 253 characters).
	MaxGateLength = 253 - len(KeySuffix)
	// MaxDownstreamLength bounds the downstream field, as the API does.
	MaxDownstreamLength = 253
	// MaxHashLength bounds the hash field.
	MaxHashLength = 128
	// MaxEpochLength bounds the epoch field.
	MaxEpochLength = 64
	// MaxPods bounds the number of entries of the pods field.
	MaxPods = 100000
)

// Document is one gate's plan as published in the ConfigMap: a base share,
// and optionally a share of its own for each pod named in Pods.
//
// The zero value is not a valid plan (its version is 0). Documents are safe
// to copy and to share between goroutines as long as nobody writes to Pods
// after sharing; Parse returns documents whose Pods map is never written
// again. Because of the map, Documents are not comparable with ==: use Equal.
type Document struct {
	// Version is the document's major version, CurrentVersion or
	// CompactVersion: it decides the encoding of Pods, not the content.
	Version int `json:"version"`
	// Gate names the gate the plan is for: the DownstreamQuota's name, a
	// DNS-1123 subdomain.
	Gate string `json:"gate"`
	// Downstream names the dependency the gate protects; informational.
	Downstream string `json:"downstream"`
	// Hash identifies the content; see Hash.
	Hash string `json:"hash"`
	// Generation is the DownstreamQuota generation the plan was computed
	// from; informational, not part of the hash.
	Generation int64 `json:"generation"`
	// Epoch identifies the incarnation of the division (the operator uses
	// the UID of the object that owns it): 1 to MaxEpochLength characters of
	// [A-Za-z0-9-]. Opaque to pods, which echo it in their Ack.
	Epoch string `json:"epoch"`
	// Revision grows with every published change of content within one
	// epoch; at least 1. Pods acknowledge the revision they enforce.
	Revision int64 `json:"revision"`

	// Permits is the base share's in-flight limit. Zero admits nobody.
	Permits int `json:"permits"`
	// RatePerSecond is the base share's admission rate; zero means no rate
	// limit.
	RatePerSecond float64 `json:"ratePerSecond"`
	// Burst is the token bucket's size: at least 1 when RatePerSecond is
	// set, 0 otherwise.
	Burst int `json:"burst"`
	// QueueCapacity is the size of the waiting room in front of the permits.
	QueueCapacity int `json:"queueCapacity"`
	// MaxQueueWaitSeconds is the longest a call may wait in the waiting
	// room; shared by every pod.
	MaxQueueWaitSeconds float64 `json:"maxQueueWaitSeconds"`
	// AcquireTimeoutSeconds is the longest a caller waits for a permit;
	// shared by every pod.
	AcquireTimeoutSeconds float64 `json:"acquireTimeoutSeconds"`
	// LatencySeconds is the downstream's typical latency; a call whose
	// deadline leaves less is shed at once. Zero turns that check off.
	// Shared by every pod.
	LatencySeconds float64 `json:"latencySeconds"`
	// DeadlineSeconds is the per-hop deadline the plan was sized for;
	// shared by every pod.
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	// Workers is the base share's dispatcher worker count.
	Workers int `json:"workers"`
	// RetryBudgetPerSecond is the base share of the workload's retry budget.
	RetryBudgetPerSecond float64 `json:"retryBudgetPerSecond"`

	// Pods maps a pod's name (a DNS-1123 subdomain) to that pod's share; a
	// pod not named here enforces the base share above. Nil or empty: every
	// pod enforces the base share. At most MaxPods entries.
	Pods map[string]PodShare `json:"pods,omitempty"`

	// Holding maps a pod's name to the permits it may still hold although
	// the document gives it fewer: it has not yet let go of a larger share
	// a revision before gave it. Optional, for the operator only: a pod
	// enforces its share, not this, and ignores it. It is the part of the
	// operator's write-ahead record a lost record cannot be rebuilt without.
	// At most MaxPods entries.
	Holding map[string]int `json:"holding,omitempty"`

	// UnacknowledgedDelaySeconds is the operator's
	// spec.handover.unacknowledgedDelay: how long after publishing a
	// smaller share it takes a pod that does not acknowledge to have
	// applied it, and hands its capacity to others. Optional, 0 when
	// unknown (a document from before the field). A pod that does not
	// acknowledge and whose plan source has not confirmed its plan for
	// nearly that long gives up its share (the library's lapse), since
	// the operator may have given it away meanwhile. At most MaxSeconds.
	UnacknowledgedDelaySeconds float64 `json:"unacknowledgedDelaySeconds,omitempty"`
}

// PodShare is one pod's share of a gate: the per-pod fields of Document.
// Every field is required on the wire and obeys the bounds of the
// Document field of the same name.
type PodShare struct {
	// Permits is the pod's in-flight limit. Zero admits nobody.
	Permits int `json:"permits"`
	// RatePerSecond is the pod's admission rate; zero means no rate limit.
	RatePerSecond float64 `json:"ratePerSecond"`
	// Burst is the token bucket's size: at least 1 when RatePerSecond is
	// set, 0 otherwise.
	Burst int `json:"burst"`
	// QueueCapacity is the size of the pod's waiting room.
	QueueCapacity int `json:"queueCapacity"`
	// Workers is the pod's dispatcher worker count.
	Workers int `json:"workers"`
	// RetryBudgetPerSecond is the pod's share of the workload's retry budget.
	RetryBudgetPerSecond float64 `json:"retryBudgetPerSecond"`
}

// Share returns the base share: the per-pod fields at the top level of d.
func (d Document) Share() PodShare {
	var s PodShare
	for _, f := range fields {
		if f.PerPod {
			f.value(nil, &s).Set(f.topLevel(&d))
		}
	}
	return s
}

// WithShare returns a copy of d whose base share is s.
func (d Document) WithShare(s PodShare) Document {
	d.setShare(s)
	return d
}

// setShare sets the per-pod fields at the top level of d to s.
func (d *Document) setShare(s PodShare) {
	for _, f := range fields {
		if f.PerPod {
			f.topLevel(d).Set(f.value(nil, &s))
		}
	}
}

// For returns the plan the pod named pod enforces: a copy of d whose
// per-pod fields are pod's entry in Pods, or the base share when pod is ""
// or not named, and whose Pods is nil. Every other field, the hash, epoch
// and revision included, is d's: they identify the published document.
func (d Document) For(pod string) Document {
	if s, ok := d.Pods[pod]; ok && pod != "" {
		d.setShare(s)
	}
	d.Pods, d.Holding = nil, nil
	return d
}

// Equal reports whether a and b hold the same values in every field, Pods
// and Holding included (a nil and an empty map are equal). It is == for
// Documents, which the map fields make incomparable.
func Equal(a, b Document) bool {
	if a.header() != b.header() || a.Share() != b.Share() || len(a.Pods) != len(b.Pods) || len(a.Holding) != len(b.Holding) {
		return false
	}
	for name, s := range a.Pods {
		if t, ok := b.Pods[name]; !ok || s != t {
			return false
		}
	}
	for name, n := range a.Holding {
		if m, ok := b.Holding[name]; !ok || n != m {
			return false
		}
	}
	return true
}

// MaxQueueWait returns MaxQueueWaitSeconds as a duration.
func (d Document) MaxQueueWait() time.Duration { return seconds(d.MaxQueueWaitSeconds) }

// AcquireTimeout returns AcquireTimeoutSeconds as a duration.
func (d Document) AcquireTimeout() time.Duration { return seconds(d.AcquireTimeoutSeconds) }

// UnacknowledgedDelay returns UnacknowledgedDelaySeconds as a duration;
// 0 when the document does not carry it.
func (d Document) UnacknowledgedDelay() time.Duration { return seconds(d.UnacknowledgedDelaySeconds) }

// Latency returns LatencySeconds as a duration.
func (d Document) Latency() time.Duration { return seconds(d.LatencySeconds) }

// Deadline returns DeadlineSeconds as a duration.
func (d Document) Deadline() time.Duration { return seconds(d.DeadlineSeconds) }

// seconds rounds to the nearest nanosecond so that a writer's 100ms, stored
// as 0.1, reads back as exactly 100ms. Out-of-range input saturates; Validate
// rejects it before a reader gets here.
func seconds(s float64) time.Duration {
	switch {
	case !(s > 0): // also NaN
		return 0
	case s >= float64(math.MaxInt64)/float64(time.Second):
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(s * float64(time.Second)))
}

// KeyFor returns the ConfigMap key, and the file name in a mounted volume,
// of the quota's document: "<quota>.json".
func KeyFor(quota string) string { return quota + KeySuffix }

// GateFromKey returns the gate whose document a ConfigMap key or file name
// holds, and false for names that are not plan keys, such as the kubelet's
// "..data" link in a mounted volume or a key whose stem is not a valid gate
// name.
func GateFromKey(key string) (string, bool) {
	gate, ok := strings.CutSuffix(key, KeySuffix)
	if !ok || validGateName(gate) != "" {
		return "", false
	}
	return gate, true
}

// header is what Document holds besides the shares.
type header struct {
	version                       int
	gate, downstream, hash, epoch string
	generation, revision          int64
	maxQueueWait, acquireTimeout  float64
	latency, deadline             float64
	unacknowledgedDelay           float64
}

func (d Document) header() header {
	return header{
		version: d.Version, gate: d.Gate, downstream: d.Downstream, hash: d.Hash, epoch: d.Epoch,
		generation: d.Generation, revision: d.Revision,
		maxQueueWait: d.MaxQueueWaitSeconds, acquireTimeout: d.AcquireTimeoutSeconds,
		latency: d.LatencySeconds, deadline: d.DeadlineSeconds,
		unacknowledgedDelay: d.UnacknowledgedDelaySeconds,
	}
}

// validPodName returns why name is not a pod name (a DNS-1123 subdomain),
// or "" when it is one. The common case is checked by hand: a document may
// name a hundred thousand pods, and the regular expression behind
// validation.IsDNS1123Subdomain would dominate Parse; the library's message
// is used for names that fail.
func validPodName(name string) string {
	if isDNS1123Subdomain(name) {
		return ""
	}
	if name == "" {
		return "must not be empty"
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return errs[0]
	}
	return "must be a lowercase RFC 1123 subdomain" // not reached: both checks agree
}

// isDNS1123Subdomain is validation.IsDNS1123Subdomain without allocation:
// at most 253 characters, dot-separated labels of [a-z0-9-] that start and
// end with [a-z0-9].
func isDNS1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	labelStart := true
	prev := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
		case c == '-':
			if labelStart {
				return false
			}
		case c == '.':
			if labelStart || prev == '-' {
				return false
			}
			labelStart = true
			prev = c
			continue
		default:
			return false
		}
		labelStart = false
		prev = c
	}
	return !labelStart && prev != '-'
}

// validGateName returns why name is not a gate name, or "" when it is one.
func validGateName(name string) string {
	if name == "" {
		return "must not be empty"
	}
	if len(name) > MaxGateLength {
		return "must be at most " + strconv.Itoa(MaxGateLength) + " characters"
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return errs[0]
	}
	return ""
}
