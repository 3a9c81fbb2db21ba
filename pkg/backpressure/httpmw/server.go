package httpmw

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
)

// DefaultRetryAfter is the Retry-After sent with a rejection whose gate
// gives no hint of its own: every reason but RateLimited.
const DefaultRetryAfter = time.Second

// Option configures Middleware.
type Option func(*options)

type options struct {
	defaultRetryAfter time.Duration
}

// WithDefaultRetryAfter sets the Retry-After sent when the rejection carries
// no hint. It is rounded up to whole seconds, and never below one second.
func WithDefaultRetryAfter(d time.Duration) Option {
	return func(o *options) { o.defaultRetryAfter = d }
}

// Middleware returns a handler middleware that admits every request through
// g before calling the next handler, and releases the permit when that
// handler returns or panics (the panic goes on after the release). Rejected
// requests get 429 or 503 with Retry-After; see the package documentation.
//
// The permit is held for as long as the handler runs, so a handler that
// streams its response holds it until the stream ends. Middleware panics if
// g is nil (see the package documentation, "A missing gate").
func Middleware(g *gate.Gate, opts ...Option) func(http.Handler) http.Handler {
	if g == nil {
		panic("httpmw: Middleware with a nil gate")
	}
	o := options{defaultRetryAfter: DefaultRetryAfter}
	for _, opt := range opts {
		opt(&o)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := g.Acquire(r.Context())
			if err != nil {
				writeRejection(w, err, o.defaultRetryAfter)
				return
			}
			defer p.Release()
			next.ServeHTTP(w, r)
		})
	}
}

// writeRejection answers a request the gate did not admit. err is a
// *gate.Rejection or the context's error from a wait that ended early.
func writeRejection(w http.ResponseWriter, err error, defaultRetryAfter time.Duration) {
	code, reason, hint := http.StatusServiceUnavailable, "", time.Duration(0)
	if rej, ok := errors.AsType[*gate.Rejection](err); ok {
		reason, hint = rej.Reason.String(), rej.RetryAfter
		if rej.Reason == gate.RateLimited {
			code = http.StatusTooManyRequests
		}
	} else {
		// The request's context ended while it waited: its client has gone,
		// or a server timeout cut the wait short. Either way the server is
		// the one that could not serve it in time.
		reason = "wait_cancelled"
		if errors.Is(err, context.DeadlineExceeded) {
			reason = "wait_deadline_exceeded"
		}
	}
	if hint <= 0 {
		hint = defaultRetryAfter
	}
	w.Header().Set("Retry-After", retryAfterSeconds(hint))
	http.Error(w, reason, code)
}

// retryAfterSeconds renders d as the delay-seconds form of Retry-After:
// whole seconds, rounded up so that a client that waits that long finds the
// gate ready, and at least 1, since 0 would invite an immediate retry.
func retryAfterSeconds(d time.Duration) string {
	s := math.Ceil(d.Seconds())
	if s < 1 {
		s = 1
	}
	if s > math.MaxInt32 {
		s = math.MaxInt32
	}
	return strconv.FormatInt(int64(s), 10)
}
