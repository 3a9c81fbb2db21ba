package traffic

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The gateway's response headers that tell how a request was served
// (examples/gateway's contract).
const (
	// FallbackHeader marks a fallback answer: the gate shed the call locally
	// and the downstream was not called. Its value is the reason.
	FallbackHeader = "X-Backpressure-Fallback"
	// DownstreamStatusHeader carries the downstream's status on a 502.
	DownstreamStatusHeader = "X-Downstream-Status"
)

// Outcome is how the gateway served one request of the load.
type Outcome uint8

const (
	// OutcomeOK is a downstream answer passed through.
	OutcomeOK Outcome = iota
	// OutcomeShed is a fallback: the gate rejected the call locally.
	OutcomeShed
	// OutcomeDownstreamError is a 502: the downstream failed the call (a
	// 429, after retries when the gateway retries).
	OutcomeDownstreamError
	// OutcomePodRejected is the pod's own inbound gate answering 429 or 503.
	OutcomePodRejected
	// OutcomeError is a transport error or any other answer.
	OutcomeError
	// NumOutcomes counts the outcomes above: the length of an array
	// indexed by Outcome.
	NumOutcomes
)

// String names the outcome as the report does.
func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeShed:
		return "shed"
	case OutcomeDownstreamError:
		return "downstream-error"
	case OutcomePodRejected:
		return "pod-rejected"
	default:
		return "error"
	}
}

// Record is one request of the load as the client saw it.
type Record struct {
	// At is when it was sent, from the start of the load.
	At time.Duration
	// Latency is the time to the end of the answer's body.
	Latency time.Duration
	// Outcome is how it was served.
	Outcome Outcome
	// Endpoint is the URL of the pod it was sent to.
	Endpoint string
}

// Endpoint is one Ready pod and the client that keeps connections to it.
type Endpoint struct {
	URL    string
	Client *http.Client
}

// Endpoints is the set of Ready pods that receive traffic, as a Service's
// endpoints are, with a load balancer in front: every pod has its own
// keep-alive connections, and a pod that leaves gets no new request and
// has its idle connections closed, so that its graceful shutdown does not
// wait on them. Pick goes round-robin. It is safe for concurrent use.
type Endpoints struct {
	// Timeout bounds one request.
	Timeout time.Duration

	mu   sync.Mutex
	list atomic.Pointer[[]*Endpoint]
	next atomic.Uint64
}

func (e *Endpoints) current() []*Endpoint {
	if p := e.list.Load(); p != nil {
		return *p
	}
	return nil
}

// Add starts sending traffic to url.
func (e *Endpoints) Add(url string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur := e.current()
	if slices.ContainsFunc(cur, func(ep *Endpoint) bool { return ep.URL == url }) {
		return
	}
	next := append(slices.Clip(cur), &Endpoint{URL: url, Client: NewLoadClient(e.Timeout)})
	e.list.Store(&next)
}

// Remove stops sending new traffic to url and closes its idle connections;
// requests in flight finish.
func (e *Endpoints) Remove(url string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var gone []*Endpoint
	next := slices.DeleteFunc(slices.Clone(e.current()), func(ep *Endpoint) bool {
		if ep.URL == url {
			gone = append(gone, ep)
			return true
		}
		return false
	})
	e.list.Store(&next)
	for _, ep := range gone {
		ep.Client.CloseIdleConnections()
	}
}

// Close removes every endpoint.
func (e *Endpoints) Close() {
	for _, ep := range e.current() {
		e.Remove(ep.URL)
	}
}

// Len returns the number of endpoints.
func (e *Endpoints) Len() int { return len(e.current()) }

// Pick returns the next endpoint, or false when there is none.
func (e *Endpoints) Pick() (*Endpoint, bool) {
	l := e.current()
	if len(l) == 0 {
		return nil, false
	}
	return l[(e.next.Add(1)-1)%uint64(len(l))], true
}

// Load is an open-loop load generator: it sends Rate requests per second,
// whether or not earlier ones have been answered, as users do. At most
// MaxOutstanding requests are in flight at once, so the harness's own
// goroutines stay bounded; a request due while that many are outstanding
// is dropped and counted, which means the harness could not keep up.
type Load struct {
	// Rate is the requests per second over all endpoints.
	Rate float64
	// Endpoints receive the requests, round-robin.
	Endpoints *Endpoints
	// MaxOutstanding bounds the requests in flight.
	MaxOutstanding int
}

// NewLoadClient returns an HTTP client that keeps connections alive, as a
// Service's clients do, and gives up on a request after timeout.
func NewLoadClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
	}
}

// LoadResult is what the load saw.
type LoadResult struct {
	// Target is the requests per second asked for.
	Target float64
	// Duration is how long the load ran.
	Duration time.Duration
	// Due counts the requests the schedule asked for; Due − Dropped −
	// NoEndpoint were sent.
	Due int64
	// Dropped counts requests not sent because MaxOutstanding were in flight.
	Dropped int64
	// NoEndpoint counts requests not sent because no pod was Ready.
	NoEndpoint int64
	// Outcomes counts the answered requests by outcome.
	Outcomes [NumOutcomes]int64
	// ShedReasons counts fallbacks by the gate's reason.
	ShedReasons map[string]int64
	// DownstreamStatuses counts 502s by the downstream's status.
	DownstreamStatuses map[string]int64
	// Errors counts OutcomeError answers by kind.
	Errors map[string]int64
	// Records holds every answered request, in completion order.
	Records []Record
}

// Sent returns the number of requests sent.
func (r *LoadResult) Sent() int64 { return r.Due - r.Dropped - r.NoEndpoint }

// AchievedPerSecond returns the requests sent per second.
func (r *LoadResult) AchievedPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Sent()) / r.Duration.Seconds()
}

// tick is how often the generator wakes to send what is due; the rate is
// exact on average whatever the timer's precision.
const tick = time.Millisecond

// Run sends load from start for d, then waits for the outstanding requests
// and returns what it saw. It stops early when ctx ends.
func (l *Load) Run(ctx context.Context, start time.Time, d time.Duration) *LoadResult {
	res := &LoadResult{
		Target:             l.Rate,
		ShedReasons:        map[string]int64{},
		DownstreamStatuses: map[string]int64{},
		Errors:             map[string]int64{},
	}
	var (
		mu  sync.Mutex // guards res's maps and Records
		wg  sync.WaitGroup
		sem = make(chan struct{}, max(1, l.MaxOutstanding))
	)
	send := func(ep *Endpoint) {
		defer func() { <-sem; wg.Done() }()
		sent := time.Now()
		o, detail := l.do(ctx, ep)
		rec := Record{At: sent.Sub(start), Latency: time.Since(sent), Outcome: o, Endpoint: ep.URL}
		mu.Lock()
		defer mu.Unlock()
		res.Outcomes[o]++
		switch o {
		case OutcomeShed:
			res.ShedReasons[detail]++
		case OutcomeDownstreamError:
			res.DownstreamStatuses[detail]++
		case OutcomeError:
			res.Errors[detail]++
		}
		res.Records = append(res.Records, rec)
	}

	t := time.NewTicker(tick)
	defer t.Stop()
	var end time.Time
loop:
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			end = time.Now()
			break loop
		case now = <-t.C:
		}
		el := now.Sub(start)
		if el < 0 {
			continue
		}
		if el >= d {
			el, end = d, start.Add(d)
		}
		for due := int64(el.Seconds() * l.Rate); res.Due < due; res.Due++ {
			ep, ok := l.Endpoints.Pick()
			if !ok {
				res.NoEndpoint++
				continue
			}
			select {
			case sem <- struct{}{}:
				wg.Add(1)
				go send(ep)
			default:
				res.Dropped++
			}
		}
		if !end.IsZero() {
			break loop
		}
	}
	res.Duration = max(0, end.Sub(start))
	wg.Wait()
	return res
}

// do sends one request and classifies the answer.
func (l *Load) do(ctx context.Context, ep *Endpoint) (Outcome, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL+"/", nil)
	if err != nil {
		return OutcomeError, "request: " + err.Error()
	}
	resp, err := ep.Client.Do(req)
	if err != nil {
		return OutcomeError, errorKind(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	switch {
	case resp.Header.Get(FallbackHeader) != "":
		return OutcomeShed, resp.Header.Get(FallbackHeader)
	case resp.StatusCode == http.StatusOK:
		return OutcomeOK, ""
	case resp.StatusCode == http.StatusBadGateway:
		return OutcomeDownstreamError, resp.Header.Get(DownstreamStatusHeader)
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusServiceUnavailable:
		return OutcomePodRejected, ""
	default:
		return OutcomeError, "status " + strconv.Itoa(resp.StatusCode)
	}
}

// errorKind names a transport error without the addresses that make every
// message unique.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the pod"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	default:
		return "other"
	}
}
