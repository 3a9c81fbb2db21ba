package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/httpmw"
)

// The headers the proxy adds to the answers it writes itself. The
// downstream's answers are passed through without them.
const (
	// RejectedHeader marks a local rejection: this pod's share had no room,
	// the downstream was not called, and the call must not be retried. Its
	// value is "true"; the body names the gate's reason (e.g. queue_full).
	RejectedHeader = "X-Backpressure-Rejected"
	// ProxyErrorHeader marks a 502, 504, 403, 405 or 400 the proxy wrote
	// because it could not or would not reach the downstream; its value
	// says why (upstream_unreachable, upstream_timeout, host_not_mapped,
	// connect_declined, not_absolute_form).
	ProxyErrorHeader = "X-Backpressure-Proxy-Error"
)

// rejectedValue is set on every gated request before the gate decides, and
// removed once it admits, so that only the gate's rejection keeps it. One
// shared slice: header values are never written in place.
var rejectedValue = []string{"true"}

// gated returns a handler that admits each request through g with
// httpmw.Middleware, which also answers the rejections (429 when rate
// limited, 503 otherwise, with Retry-After), and proxies the admitted ones
// with rp. The permit is held until rp has copied the whole response,
// trailers included, to the client.
//
// A client that leaves does not end the call at once: the downstream is
// still working on it, and counts it in flight until it answers, so the
// permit stays taken until then, for at most linger() after the client
// left (the plan's deadline), after which the call is cancelled (see
// httpmw.Detach, which httpmw.Transport uses for the same reason). Releasing
// the permit when the client leaves would let a new call in while the
// downstream still holds the abandoned one, and exceed the contract
// whenever callers time out.
//
// A client that stays but never finishes sending its body, or never reads
// the answer, would hold the permit as long as it likes: every admitted
// call gets a read and a write deadline on its connection, limit() from
// admission, and is cancelled then. An upgraded connection (a WebSocket)
// loses the connection's deadlines when it is hijacked, but the reverse
// proxy closes it when the call's context ends: a tunnel holds its permit
// for that long at most. An h2c upgrade is refused by leaving the Upgrade out:
// over one HTTP/2 connection the client would send any number of calls on
// one permit, and an h2c client goes on in HTTP/1.1 when not upgraded.
//
// With bounded (--reserve-address), every call is given the plan's deadline
// before it asks the gate: a call may then borrow a permit of the reserve
// (gate.Gate.SetLender), whose lease must end after the call does, and the
// call ends by the deadline plus linger() at the latest (lingering asks
// the lease for that much more, see lingering); limit() only ends it
// sooner.
func gated(g *gate.Gate, rp http.Handler, linger, limit func() time.Duration, bounded bool) http.Handler {
	admitted := httpmw.Middleware(g)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delete(w.Header(), RejectedHeader)
		end := time.Now().Add(limit())
		rc := http.NewResponseController(w)
		// Errors mean the connection has no deadlines (HTTP/2 from a
		// client that spoke it directly): the linger still bounds the call
		// once the client leaves.
		_ = rc.SetReadDeadline(end)
		_ = rc.SetWriteDeadline(end)
		ctx, cancel := httpmw.Detach(r.Context(), linger)
		defer cancel()
		// An upgrade hijacks the connection, which clears its deadlines;
		// the reverse proxy closes the tunnel when the call's context ends.
		ctx, stop := context.WithDeadline(ctx, end)
		defer stop()
		rp.ServeHTTP(w, r.WithContext(ctx))
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dropH2C(r)
		w.Header()[RejectedHeader] = rejectedValue
		if bounded {
			ctx, cancel := context.WithTimeout(r.Context(), linger())
			defer cancel()
			r = r.WithContext(ctx)
		}
		admitted.ServeHTTP(w, r)
	})
}

// dropH2C removes an upgrade to h2c from r, which then goes on as
// HTTP/1.1.
func dropH2C(r *http.Request) {
	if !strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), "h2c") {
		return
	}
	r.Header.Del("Upgrade")
	r.Header.Del("HTTP2-Settings")
	var keep []string
	for _, v := range r.Header.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "upgrade") && !strings.EqualFold(tok, "http2-settings") {
				keep = append(keep, tok)
			}
		}
	}
	r.Header.Del("Connection")
	if len(keep) > 0 {
		r.Header.Set("Connection", strings.Join(keep, ", "))
	}
}

// callLimit returns the limit of gated for the gate name: maxCall when
// set, else twice the plan's deadline in force (the linger's), since a call
// that took twice its deadline is over by any account.
func callLimit(maxCall time.Duration, linger func() time.Duration) func() time.Duration {
	if maxCall > 0 {
		return func() time.Duration { return maxCall }
	}
	return func() time.Duration { return 2 * linger() }
}

// lingering asks its Lender for leases longer by linger(): a call's permit
// may be held that long after the call's deadline (gated's Detach).
type lingering struct {
	gate.Lender
	linger func() time.Duration
}

func (l lingering) Lend(ctx context.Context, hold, wait time.Duration) (gate.Loan, error) {
	return l.Lender.Lend(ctx, hold+l.linger(), wait)
}

// defaultLinger bounds how long a call whose client has left may keep its
// permit when the plan gives no deadline.
const defaultLinger = 10 * time.Second

// lingerFor returns the linger of gated for the gate name: the deadline of
// the share in force, or defaultLinger.
func lingerFor(shares interface {
	Share(string) (backpressure.Share, error)
}, name string) func() time.Duration {
	return func() time.Duration {
		if p, err := shares.Share(name); err == nil && p.Deadline > 0 {
			return p.Deadline
		}
		return defaultLinger
	}
}

// upstreamTransport sends the admitted calls. Compression is off so that
// bodies pass through as the downstream sent them (the transport would
// otherwise ask for gzip and decompress on its own), and the environment's
// proxy is ignored so that the proxy never sends calls back to itself.
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DisableCompression = true
	// Every call in flight may need a connection of its own; keeping them
	// idle avoids a new TCP (and TLS) handshake per call.
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	return t
}

// countingTransport counts every response the downstream sends, by status
// code, in backpressure_downstream_http_responses_total of one gate
// (httpmw.Metrics) — the series the library's httpmw.Transport feeds, so a
// dashboard reads the downstream's 429s the same way whether a pod calls
// through the library or through this proxy. Calls that fail before a
// response arrives are not counted: the proxy answers them itself (502,
// 504).
type countingTransport struct {
	next      http.RoundTripper
	gate      string
	responses *httpmw.Metrics
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		t.responses.ObserveResponse(t.gate, resp.StatusCode)
	}
	return resp, err
}

// newReverseProxy returns the proxy for one route or for the forwarding
// port: target, when not nil, replaces the scheme, host and path prefix of
// each request (a route); nil keeps the absolute-form URL the client sent
// (forwarding). Responses are flushed as they arrive (FlushInterval -1), so
// streams stay streams; no X-Forwarded-* header is added. The proxy's own
// headers are taken out of the downstream's answers (scrubResponse).
func newReverseProxy(target *url.URL, t http.RoundTripper, log *slog.Logger) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if target != nil {
				pr.SetURL(target)
			}
		},
		Transport:      t,
		FlushInterval:  -1,
		ModifyResponse: scrubResponse,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandler:   proxyError(log),
	}
}

// ownHeaders are the headers only the proxy may write: a downstream that
// sent X-Backpressure-Rejected would pass its 503 off as a local rejection,
// which the application must not retry and the dashboards count as this
// pod's share running out.
var ownHeaders = []string{RejectedHeader, ProxyErrorHeader}

// scrubResponse removes the proxy's own headers from a downstream's answer,
// from its header and, once the body has been read, its trailers.
func scrubResponse(resp *http.Response) error {
	for _, h := range ownHeaders {
		resp.Header.Del(h)
		resp.Trailer.Del(h)
	}
	// An upgrade's body is the connection itself, which the reverse proxy
	// writes to as well; it has no trailers.
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &scrubTrailers{ReadCloser: resp.Body, resp: resp}
	}
	return nil
}

// scrubTrailers removes the proxy's own headers from the trailers of resp
// when its body ends, which is when they arrive.
type scrubTrailers struct {
	io.ReadCloser
	resp *http.Response
}

func (s *scrubTrailers) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		for _, h := range ownHeaders {
			s.resp.Trailer.Del(h)
		}
	}
	return n, err
}

// proxyError answers a call the downstream did not answer: 504 when it
// timed out, 502 otherwise. A call whose client has gone gets no answer.
func proxyError(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return
		}
		code, reason := http.StatusBadGateway, "upstream_unreachable"
		if ne, ok := errors.AsType[net.Error](err); errors.Is(err, context.DeadlineExceeded) || ok && ne.Timeout() {
			code, reason = http.StatusGatewayTimeout, "upstream_timeout"
		}
		log.Debug("Downstream call failed", "host", r.URL.Host, "err", err)
		w.Header().Set(ProxyErrorHeader, reason)
		http.Error(w, reason, code)
	}
}

// forwarder serves HTTP_PROXY-style requests: absolute-form URLs whose host
// is mapped to a gate. CONNECT is declined, and so is an Upgrade but to h2c
// (which gated leaves out): a tunnel hides the calls it carries, so a
// permit held for a tunnel's life would count connections, not calls in
// flight (see docs/sidecar.md).
type forwarder struct {
	hosts map[string]http.Handler // lower-case host or host:port → gated proxy
}

func newForwarder(hosts map[string]string, rt *backpressure.Runtime, transport func(gate string) http.RoundTripper, maxCall time.Duration, bounded bool, log *slog.Logger) (*forwarder, error) {
	byGate := map[string]http.Handler{}
	f := &forwarder{hosts: map[string]http.Handler{}}
	for host, name := range hosts {
		h, ok := byGate[name]
		if !ok {
			g, err := rt.Gate(name)
			if err != nil {
				return nil, err
			}
			linger := lingerFor(rt, name)
			h = gated(g, newReverseProxy(nil, transport(name), log), linger, callLimit(maxCall, linger), bounded)
			byGate[name] = h
		}
		f.hosts[host] = h
	}
	return f, nil
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		w.Header().Set(ProxyErrorHeader, "connect_declined")
		http.Error(w, "connect_declined: CONNECT tunnels are not gated; call this downstream through a --route port", http.StatusMethodNotAllowed)
		return
	case !r.URL.IsAbs() || r.URL.Scheme != "http":
		w.Header().Set(ProxyErrorHeader, "not_absolute_form")
		http.Error(w, "not_absolute_form: this port forwards absolute-form http:// requests only", http.StatusBadRequest)
		return
	case r.Header.Get("Upgrade") != "" && !strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), "h2c"):
		w.Header().Set(ProxyErrorHeader, "upgrade_declined")
		http.Error(w, "upgrade_declined: upgraded connections are not gated here; call this downstream through a --route port", http.StatusNotImplemented)
		return
	}
	if h := f.lookup(r.URL.Host); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	w.Header().Set(ProxyErrorHeader, "host_not_mapped")
	http.Error(w, "host_not_mapped: no gate for host "+r.URL.Host, http.StatusForbidden)
}

// lookup finds the gated proxy of hostport: host:port as mapped; a host
// mapped without a port stands for http's port 80 only, so that a mapping
// for a web API does not open every other port of that host (its database,
// its admin port) through the pod's share.
func (f *forwarder) lookup(hostport string) http.Handler {
	hostport = strings.ToLower(hostport)
	if h, ok := f.hosts[hostport]; ok {
		return h
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if port == forwardDefaultPort {
		return f.hosts[host]
	}
	return nil
}

// The servers' own timeouts. readHeaderTimeout bounds how long a client
// may take to send a request's headers, idleTimeout how long a kept-alive
// connection may wait for the next request; a call's body and answer are
// bounded per call instead (gated), since how long a call may take is the
// plan's business. The probe and metrics servers answer small requests at
// once, and get tight bounds on everything.
const (
	readHeaderTimeout  = 10 * time.Second
	idleTimeout        = 90 * time.Second
	localReadTimeout   = 10 * time.Second
	localWriteTimeout  = 30 * time.Second
	forwardDefaultPort = "80"
)
