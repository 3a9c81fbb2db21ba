package plan

import (
	"errors"
	"fmt"
	"math"
	"regexp"
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

	count := func(field string, v int) {
		if v < 0 || v > MaxCount {
			bad(field, "must be in [0, %d], got %d", MaxCount, v)
		}
	}
	count("permits", d.Permits)
	count("burst", d.Burst)
	count("queueCapacity", d.QueueCapacity)
	count("workers", d.Workers)

	rate := func(field string, v float64) bool {
		if !inRange(v, MaxPerSecond) {
			bad(field, "must be a number in [0, %d], got %v", int64(MaxPerSecond), v)
			return false
		}
		return true
	}
	if rate("ratePerSecond", d.RatePerSecond) && d.Burst >= 0 && d.Burst <= MaxCount {
		switch {
		case d.RatePerSecond > 0 && d.Burst < 1:
			bad("burst", "must be at least 1 when ratePerSecond is set, got %d", d.Burst)
		case d.RatePerSecond == 0 && d.Burst != 0:
			bad("burst", "must be 0 when ratePerSecond is 0 (no rate limit), got %d", d.Burst)
		}
	}
	rate("retryBudgetPerSecond", d.RetryBudgetPerSecond)

	duration := func(field string, v float64) {
		if !inRange(v, MaxSeconds) {
			bad(field, "must be a number of seconds in [0, %d], got %v", MaxSeconds, v)
		}
	}
	duration("maxQueueWaitSeconds", d.MaxQueueWaitSeconds)
	duration("acquireTimeoutSeconds", d.AcquireTimeoutSeconds)
	duration("latencySeconds", d.LatencySeconds)
	duration("deadlineSeconds", d.DeadlineSeconds)

	return errors.Join(errs...)
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
