package plan

import (
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// CurrentVersion is the major version of the document this package reads and
// writes.
const CurrentVersion = 1

// KeySuffix ends every plan key in the ConfigMap and every plan file in a
// mounted volume.
const KeySuffix = ".json"

// Bounds of the numeric fields. They keep every value representable as a
// Kubernetes int32 and every duration as a time.Duration; a value beyond
// them is a corrupt document, not a plan.
const (
	// MaxCount bounds permits, burst, queueCapacity and workers.
	MaxCount = math.MaxInt32
	// MaxPerSecond bounds ratePerSecond and retryBudgetPerSecond.
	MaxPerSecond = float64(math.MaxInt32)
	// MaxSeconds bounds the duration fields: 366 days.
	MaxSeconds = 366 * 24 * 60 * 60
	// MaxGateLength bounds the gate name so that KeyFor(gate) is a valid
	// ConfigMap key (at most 253 characters).
	MaxGateLength = 253 - len(KeySuffix)
	// MaxDownstreamLength bounds the downstream field, as the API does.
	MaxDownstreamLength = 253
	// MaxHashLength bounds the hash field.
	MaxHashLength = 128
)

// Document is one gate's per-pod plan as published in the ConfigMap.
//
// The zero value is not a valid plan (its version is 0). Documents are plain
// values: comparable with ==, safe to copy and to share between goroutines.
type Document struct {
	// Version is the document's major version; readers accept only
	// CurrentVersion.
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

	// Permits is the pod's in-flight limit. Zero admits nobody.
	Permits int `json:"permits"`
	// RatePerSecond is the pod's admission rate; zero means no rate limit.
	RatePerSecond float64 `json:"ratePerSecond"`
	// Burst is the token bucket's size: at least 1 when RatePerSecond is
	// set, 0 otherwise.
	Burst int `json:"burst"`
	// QueueCapacity is the size of the waiting room in front of the permits.
	QueueCapacity int `json:"queueCapacity"`
	// MaxQueueWaitSeconds is the longest a call may wait in the waiting room.
	MaxQueueWaitSeconds float64 `json:"maxQueueWaitSeconds"`
	// AcquireTimeoutSeconds is the longest a caller waits for a permit.
	AcquireTimeoutSeconds float64 `json:"acquireTimeoutSeconds"`
	// LatencySeconds is the downstream's typical latency; a call whose
	// deadline leaves less is shed at once. Zero turns that check off.
	LatencySeconds float64 `json:"latencySeconds"`
	// DeadlineSeconds is the per-hop deadline the plan was sized for.
	DeadlineSeconds float64 `json:"deadlineSeconds"`
	// Workers is the dispatcher's worker count.
	Workers int `json:"workers"`
	// RetryBudgetPerSecond is the pod's share of the workload's retry budget.
	RetryBudgetPerSecond float64 `json:"retryBudgetPerSecond"`
}

// MaxQueueWait returns MaxQueueWaitSeconds as a duration.
func (d Document) MaxQueueWait() time.Duration { return seconds(d.MaxQueueWaitSeconds) }

// AcquireTimeout returns AcquireTimeoutSeconds as a duration.
func (d Document) AcquireTimeout() time.Duration { return seconds(d.AcquireTimeoutSeconds) }

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
