package plan

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
)

// ErrUnsupportedVersion is matched (errors.Is) by the error for a document
// whose major version this package does not read.
var ErrUnsupportedVersion = errors.New("plan: unsupported document version")

// FieldError reports a field of a document that is missing, malformed or
// out of range.
type FieldError struct {
	// Field is the field's JSON name, such as "permits".
	Field string
	// Detail says what is wrong and which values are allowed.
	Detail string
	// Err is a sentinel the error matches with errors.Is, such as
	// ErrUnsupportedVersion; nil for range errors.
	Err error
}

// Error implements error.
func (e *FieldError) Error() string { return "plan: " + e.Field + ": " + e.Detail }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// hashPattern keeps hashes safe to use as annotation values, metric labels
// and log fields, while leaving a future writer free to change algorithms.
var hashPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// Validate reports every field of d that is out of range, joined into one
// error of *FieldError values (use errors.As to get the first), or nil when
// d is a plan a gate can enforce. A version other than CurrentVersion
// yields only an error wrapping ErrUnsupportedVersion, because the other
// fields of an unknown version mean nothing to this reader.
func Validate(d Document) error {
	if d.Version != CurrentVersion {
		return versionError(int64(d.Version))
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}

	if why := validGateName(d.Gate); why != "" {
		bad("gate", "%s", why)
	}
	if len(d.Downstream) > MaxDownstreamLength {
		bad("downstream", "must be at most %d characters", MaxDownstreamLength)
	}
	if d.Hash != "" && (len(d.Hash) > MaxHashLength || !hashPattern.MatchString(d.Hash)) {
		bad("hash", "must be 1 to %d characters of [A-Za-z0-9._:-]", MaxHashLength)
	}
	if d.Generation < 0 {
		bad("generation", "must be at least 0, got %d", d.Generation)
	}

	if why := validEpoch(d.Epoch); why != "" {
		bad("epoch", "%s", why)
	}
	if d.Revision < 1 {
		bad("revision", "must be at least 1, got %d", d.Revision)
	}

	validateShare("", d.Share(), bad)

	duration := func(field string, v float64) {
		if !inRange(v, MaxSeconds) {
			bad(field, "must be a number of seconds in [0, %d], got %v", MaxSeconds, v)
		}
	}
	duration("maxQueueWaitSeconds", d.MaxQueueWaitSeconds)
	duration("acquireTimeoutSeconds", d.AcquireTimeoutSeconds)
	duration("latencySeconds", d.LatencySeconds)
	duration("deadlineSeconds", d.DeadlineSeconds)

	if len(d.Pods) > MaxPods {
		errs = append(errs, podCountError(len(d.Pods)))
	} else if len(d.Pods) > 0 {
		// Sorted only when some entry is bad, so that the error does not
		// depend on map order; a valid document pays one pass.
		var badNames []string
		for name, share := range d.Pods {
			if validPodName(name) != "" || !shareValid(share) {
				badNames = append(badNames, name)
			}
		}
		slices.Sort(badNames)
		for _, name := range badNames {
			if why := validPodName(name); why != "" {
				bad(podField(name, ""), "key must be a pod name: %s", why)
			}
			validateShare(podField(name, "."), d.Pods[name], bad)
		}
	}

	return errors.Join(errs...)
}

// validateShare reports, through bad, every per-pod field of s that is out
// of range, each named with prefix (such as `pods["a"].`) before it.
func validateShare(prefix string, s PodShare, bad func(field, format string, args ...any)) {
	count := func(field string, v int) {
		if v < 0 || v > MaxCount {
			bad(prefix+field, "must be in [0, %d], got %d", MaxCount, v)
		}
	}
	count("permits", s.Permits)
	count("burst", s.Burst)
	count("queueCapacity", s.QueueCapacity)
	count("workers", s.Workers)

	rate := func(field string, v float64) bool {
		if !inRange(v, MaxPerSecond) {
			bad(prefix+field, "must be a number in [0, %d], got %v", int64(MaxPerSecond), v)
			return false
		}
		return true
	}
	if rate("ratePerSecond", s.RatePerSecond) && s.Burst >= 0 && s.Burst <= MaxCount {
		switch {
		case s.RatePerSecond > 0 && s.Burst < 1:
			bad(prefix+"burst", "must be at least 1 when ratePerSecond is set, got %d", s.Burst)
		case s.RatePerSecond == 0 && s.Burst != 0:
			bad(prefix+"burst", "must be 0 when ratePerSecond is 0 (no rate limit), got %d", s.Burst)
		}
	}
	rate("retryBudgetPerSecond", s.RetryBudgetPerSecond)
}

// shareValid reports whether validateShare would find nothing wrong with s,
// without formatting anything.
func shareValid(s PodShare) bool {
	ok := true
	validateShare("", s, func(string, string, ...any) { ok = false })
	return ok
}

// podField names a field of the pods entry name, as pods["name"].field;
// sep is "." before a field and "" for the entry itself.
func podField(name, sep string) string {
	return "pods[" + strconv.Quote(name) + "]" + sep
}

func podCountError(n int) error {
	return &FieldError{Field: "pods", Detail: fmt.Sprintf("must have at most %d entries, got %d", MaxPods, n)}
}

// validEpoch returns why s is not an epoch, or "" when it is one.
func validEpoch(s string) string {
	if len(s) == 0 || len(s) > MaxEpochLength {
		return fmt.Sprintf("must be 1 to %d characters of [A-Za-z0-9-], got %d characters", MaxEpochLength, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Sprintf("must be 1 to %d characters of [A-Za-z0-9-], got %q", MaxEpochLength, s)
		}
	}
	return ""
}

// inRange reports whether v is a finite number in [0, upper]; NaN fails
// every comparison and so fails here too.
func inRange(v, upper float64) bool {
	return v >= 0 && v <= upper && !math.IsInf(v, 0)
}

func versionError(v int64) error {
	return &FieldError{
		Field:  "version",
		Detail: fmt.Sprintf("unsupported version %d; this reader understands version %d", v, CurrentVersion),
		Err:    ErrUnsupportedVersion,
	}
}
