package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/retry"
)

// The response headers that tell a client how its request was served.
const (
	// FallbackHeader marks a fallback answer: this pod's share of the
	// downstream had no room, so the downstream was not called. Its value
	// is the gate's reason, e.g. queue-full.
	FallbackHeader = "X-Backpressure-Fallback"
	// DownstreamStatusHeader carries the downstream's status code on a 502.
	DownstreamStatusHeader = "X-Downstream-Status"
)

// maxBody bounds a downstream response held in memory.
const maxBody = 1 << 20

// gateway answers GET / by calling the downstream through the gate.
type gateway struct {
	rt       *backpressure.Runtime
	gateName string
	client   *http.Client // its transport is the gate
	target   string
	retries  retry.Policy
}

func newGateway(c config, rt *backpressure.Runtime, client *http.Client) (*gateway, error) {
	budget, err := rt.Budget(c.gate)
	if err != nil {
		return nil, err
	}
	return &gateway{
		rt:       rt,
		gateName: c.gate,
		client:   client,
		target:   c.downstream.JoinPath("/").String(),
		retries: retry.Policy{
			MaxRetries: c.maxRetries,
			Budget:     budget, // the pod's share of the workload's retry budget
			Retryable:  retryable(c.retryOn429),
		},
	}, nil
}

func (gw *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}

	// The plan was sized for this per-hop deadline: queue wait, call and
	// retries must fit in it.
	ctx := r.Context()
	if p, err := gw.rt.Share(gw.gateName); err == nil && p.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Deadline)
		defer cancel()
	}

	body, err := gw.call(ctx, r.URL.RawQuery)
	var rejected *gate.Rejection
	var failed *statusError
	switch {
	case err == nil:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(body)
	case errors.As(err, &rejected):
		// Shed by this pod's own share: answer at once from the fallback,
		// never retry, never call the downstream.
		reason := strings.ReplaceAll(rejected.Reason.String(), "_", "-")
		w.Header().Set(FallbackHeader, reason)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "fallback: %s\n", reason)
	case errors.As(err, &failed):
		w.Header().Set(DownstreamStatusHeader, strconv.Itoa(failed.code))
		http.Error(w, "downstream answered "+strconv.Itoa(failed.code), http.StatusBadGateway)
	default:
		// No answer at all: refused connection, reset, deadline.
		http.Error(w, "downstream: "+err.Error(), http.StatusBadGateway)
	}
}

// call makes one downstream call, with the inbound request's query (a
// caller's parameters for the downstream), and retries as the policy allows. The body
// is read in full before returning so that the call's permit is released
// before the answer is written to a possibly slow client.
func (gw *gateway) call(ctx context.Context, query string) ([]byte, error) {
	var body []byte
	target := gw.target
	if query != "" {
		target += "?" + query
	}
	err := retry.Do(ctx, gw.retries, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := gw.client.Do(req)
		if err != nil {
			return err // a *gate.Rejection (inside *url.Error) when shed
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return &statusError{code: resp.StatusCode}
		}
		body = b
		return err
	})
	return body, err
}

// statusError is a downstream answer other than 2xx.
type statusError struct{ code int }

func (e *statusError) Error() string { return "downstream answered " + strconv.Itoa(e.code) }

// retryable says which failed calls may be retried. A 429 means the
// downstream is over capacity: retrying adds load exactly when there is none
// to spare, so it is retried only when asked for. Gateway errors and
// failures without an answer are transient failures of one attempt.
func retryable(on429 bool) retry.Classifier {
	return func(err error) bool {
		var s *statusError
		if errors.As(err, &s) {
			switch s.code {
			case http.StatusTooManyRequests:
				return on429
			case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				return true
			}
			return false
		}
		// The call's own deadline or cancellation ends the retries anyway.
		return !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
	}
}
