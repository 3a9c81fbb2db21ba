package httpmw

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/gate"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure/internal/detach"
)

// Transport is an http.RoundTripper that admits every call through Gate
// before Base sends it. The permit is held until the response body has been
// read to the end or closed, the call fails, or the request's context ends
// after the response arrived, whichever comes first, and is released
// exactly once. A call the gate rejects is not sent, and RoundTrip returns
// the *gate.Rejection.
//
// A caller whose context ends before the response arrives gets the
// context's error at once, but the call is not cancelled: the downstream
// keeps working on it, and counts it in flight, until it answers. So the
// call goes on in the background on a context detached from the caller's
// (see Detach), and keeps its permit until the downstream answers (then at
// most 64 KiB of the body are read and the body closed) or Linger passes,
// when it is cancelled. Releasing the permit when the caller leaves would
// let a new call in while the downstream still holds the abandoned one, and
// exceed the downstream's contract whenever callers time out. The request
// body is not needed by then: the base transport has sent it already, or
// the call fails.
//
// Transport never retries. Set Gate before the first call and do not change
// the fields afterwards. A Transport is safe for concurrent use by multiple
// goroutines and must not be copied after first use.
type Transport struct {
	// Gate admits the calls. RoundTrip panics when it is nil (see the
	// package documentation, "A missing gate").
	Gate *gate.Gate
	// Base sends the admitted calls; nil means http.DefaultTransport.
	Base http.RoundTripper
	// OnThrottled, if not nil, is called with every 429 Too Many Requests
	// response from the downstream before RoundTrip returns it. It must not
	// read or close the body, and must not block.
	OnThrottled func(*http.Response)
	// Metrics, if not nil, counts the downstream's responses by status code.
	Metrics *Metrics
	// Linger, if not nil, returns how long a call whose caller left before
	// the response arrived may still wait for it, holding its permit:
	// typically the deadline of the plan in force (backpressure.Share.Deadline).
	// Nil, or a result <= 0, means 10 seconds.
	Linger func() time.Duration

	throttled atomic.Uint64
}

// Throttled returns how many 429 Too Many Requests responses the downstream
// has sent through t.
func (t *Transport) Throttled() uint64 { return t.throttled.Load() }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Gate == nil {
		closeBody(req)
		panic("httpmw: Transport.Gate is nil")
	}
	// The permit lives in the body wrapper from the start: moving a Permit
	// out of a local variable would copy it.
	b := &body{}
	var err error
	if b.permit, err = t.Gate.Acquire(req.Context()); err != nil {
		// RoundTrip must close the request body, even when it sends nothing.
		closeBody(req)
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	caller := req.Context()
	if caller.Done() == nil {
		// The caller can never leave: nothing to detach from.
		resp, err := base.RoundTrip(req)
		return t.admitted(caller, resp, err, b, func() {})
	}
	ctx, cancel := Detach(caller, t.Linger)
	type result struct {
		resp *http.Response
		err  error
	}
	answered := make(chan result)
	abandoned := make(chan struct{})
	go func() {
		resp, err := base.RoundTrip(req.WithContext(ctx))
		select {
		case answered <- result{resp, err}:
		case <-abandoned:
			t.settle(resp, err, b, cancel)
		}
	}()
	select {
	case r := <-answered:
		return t.admitted(caller, r.resp, r.err, b, cancel)
	case <-caller.Done():
		close(abandoned)
		return nil, caller.Err()
	}
}

// admitted hands the outcome of an admitted call to its caller. cancel ends
// the context the call was sent on.
func (t *Transport) admitted(caller context.Context, resp *http.Response, err error, b *body, cancel context.CancelFunc) (*http.Response, error) {
	if err != nil || resp == nil {
		b.permit.Release()
		cancel()
		if err == nil {
			err = errNoResponse
		}
		return nil, err
	}
	t.observe(resp)
	if resp.Body == nil || resp.Body == http.NoBody {
		// Nothing more will come from the downstream: the call has ended.
		b.permit.Release()
		cancel()
		return resp, nil
	}
	b.rc, b.cancel = resp.Body, cancel
	// If the caller neither reads nor closes the body, the call still ends
	// when its context does: cancelling the call's own context makes the
	// transport abandon the connection, as it would with the caller's.
	b.stop = context.AfterFunc(caller, b.abort)
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection is written to as well as read.
		resp.Body = &readWriteBody{body: b, w: rw}
	} else {
		resp.Body = b
	}
	return resp, nil
}

// maxDrain bounds how much of an abandoned call's body is read before it is
// closed: enough to let a short answer free its connection for reuse.
const maxDrain = 64 << 10

// settle ends a call whose caller left before the response arrived, once
// the downstream has answered or the call failed: only then is the call no
// longer in flight at the downstream.
func (t *Transport) settle(resp *http.Response, err error, b *body, cancel context.CancelFunc) {
	if err == nil && resp != nil {
		t.observe(resp)
		if resp.Body != nil {
			_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
			_ = resp.Body.Close()
		}
	}
	b.permit.Release()
	cancel()
}

var errNoResponse = errors.New("httpmw: base RoundTripper returned no response and no error")

// Detach returns a context that carries ctx's values but not its end: it
// is cancelled linger() after ctx ends (linger is asked then; nil or a
// result <= 0 means 10 seconds), or when cancel is called, which must be
// called once the work done under it is over.
//
// It is for a call that must outlive its caller: the downstream keeps
// working on a call whose client has left, so the call, and the permit it
// holds, must last until the downstream answers, but not forever. The gRPC
// client interceptor of package grpcmw holds a unary call's permit the
// same way.
func Detach(ctx context.Context, linger func() time.Duration) (context.Context, context.CancelFunc) {
	return detach.Context(ctx, linger)
}

// CloseIdleConnections closes the idle connections of the base transport, if
// it has such a method, so that http.Client.CloseIdleConnections reaches it.
func (t *Transport) CloseIdleConnections() {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) observe(resp *http.Response) {
	if t.Metrics != nil {
		t.Metrics.ObserveResponse(t.Gate.Name(), resp.StatusCode)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		t.throttled.Add(1)
		if t.OnThrottled != nil {
			t.OnThrottled(resp)
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// body holds a call's permit until the response body is done with: read to
// the end or to an error, closed, or abandoned when the request's context
// ended. Read, Close and the context may race to end it; done lets exactly
// one of them release the permit.
type body struct {
	rc     io.ReadCloser
	permit gate.Permit
	cancel context.CancelFunc // ends the context the call was sent on
	stop   func() bool
	done   atomic.Bool
}

// Read reads the body and ends the call on any error, io.EOF included.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		// io.EOF: the response is complete. Any other error: the connection
		// has failed or been abandoned. Either way the downstream is done.
		b.end()
	}
	return n, err
}

// Close closes the body and ends the call.
func (b *body) Close() error {
	err := b.rc.Close()
	b.end()
	return err
}

// end releases the permit on the caller's side and unregisters the
// context's callback, which would otherwise stay with a long-lived context.
func (b *body) end() {
	b.release()
	b.stop()
	b.cancel()
}

// abort ends a call whose caller's context ended while the body was open:
// the connection is abandoned, as the transport would do with the caller's
// context, and the permit released.
func (b *body) abort() {
	b.cancel()
	b.release()
}

func (b *body) release() {
	if b.done.CompareAndSwap(false, true) {
		b.permit.Release()
	}
}

// readWriteBody is the body of a 101 Switching Protocols response, which is
// also the connection to write to.
type readWriteBody struct {
	*body
	w io.Writer
}

// Write writes to the upgraded connection.
func (b *readWriteBody) Write(p []byte) (int, error) { return b.w.Write(p) }
