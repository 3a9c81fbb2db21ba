package plan

import (
	"errors"
	"fmt"
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
// d is a plan a gate can enforce. A version other than CurrentVersion and
// CompactVersion yields only an error wrapping ErrUnsupportedVersion,
// because the other fields of an unknown version mean nothing to this
// reader.
func Validate(d Document) error {
	if !knownVersion(int64(d.Version)) {
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
	for _, f := range fields {
		if !f.PerPod {
			f.check("", f.value(&d, nil), bad)
		}
	}

	if v := d.UnacknowledgedDelaySeconds; !inRange(v, MaxSeconds) {
		bad("unacknowledgedDelaySeconds", "must be in [0, %d], got %v", MaxSeconds, v)
	}

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

	if len(d.Holding) > MaxPods {
		bad("holding", "must have at most %d entries, got %d", MaxPods, len(d.Holding))
	} else {
		var badNames []string
		for name, n := range d.Holding {
			if validPodName(name) != "" || n < 0 || n > MaxPermits {
				badNames = append(badNames, name)
			}
		}
		slices.Sort(badNames)
		for _, name := range badNames {
			field := fmt.Sprintf("holding[%q]", name)
			if why := validPodName(name); why != "" {
				bad(field, "key must be a pod name: %s", why)
			}
			if n := d.Holding[name]; n < 0 || n > MaxPermits {
				bad(field, "must be in [0, %d], got %d", MaxPermits, n)
			}
		}
	}

	return errors.Join(errs...)
}

// validateShare reports, through bad, every per-pod field of s that is out
// of range or inconsistent with another, each named with prefix (such as
// `pods["a"].`) before it.
func validateShare(prefix string, s PodShare, bad func(field, format string, args ...any)) {
	var in fieldSet
	for i, f := range fields {
		if f.PerPod && f.check(prefix, f.value(nil, &s), bad) {
			in |= 1 << i
		}
	}
	// The rules compare fields, each only when both are in range: one out
	// of range is reported once, above.
	if in.has("ratePerSecond", "burst") {
		switch {
		case s.RatePerSecond > 0 && s.Burst < 1:
			bad(prefix+"burst", "must be at least 1 when ratePerSecond is set, got %d", s.Burst)
		case s.RatePerSecond == 0 && s.Burst != 0:
			bad(prefix+"burst", "must be 0 when ratePerSecond is 0 (no rate limit), got %d", s.Burst)
		}
	}
	if in.has("permits", "workers") && s.Workers > s.Permits {
		bad(prefix+"workers", "must be at most permits %d, got %d", s.Permits, s.Workers)
	}
	// A pod with no permit admits no call: a waiting room, a rate or a
	// retry budget next to it is a share granted inconsistently.
	if in.has("permits", "queueCapacity") && s.Permits == 0 && s.QueueCapacity != 0 {
		bad(prefix+"queueCapacity", "must be 0 when permits is 0, got %d", s.QueueCapacity)
	}
	if in.has("permits", "ratePerSecond") && s.Permits == 0 && s.RatePerSecond != 0 {
		bad(prefix+"ratePerSecond", "must be 0 when permits is 0, got %v", s.RatePerSecond)
	}
	if in.has("permits", "retryBudgetPerSecond") && s.Permits == 0 && s.RetryBudgetPerSecond != 0 {
		bad(prefix+"retryBudgetPerSecond", "must be 0 when permits is 0, got %v", s.RetryBudgetPerSecond)
	}
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

func versionError(v int64) error {
	return &FieldError{
		Field:  "version",
		Detail: fmt.Sprintf("unsupported version %d; this reader understands versions %d and %d", v, CurrentVersion, CompactVersion),
		Err:    ErrUnsupportedVersion,
	}
}

// knownVersion reports whether this package reads documents of version v.
func knownVersion(v int64) bool { return v == CurrentVersion || v == CompactVersion }
