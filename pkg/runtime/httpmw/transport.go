package httpmw

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/backpressure-dev/backpressure-operator/pkg/runtime/gate"
)

// errNoGate is returned by a Transport whose Gate was not set: a call that
// should be limited must not go out unlimited by mistake.
var errNoGate = errors.New("httpmw: Transport.Gate is nil")

// Transport is an http.RoundTripper that admits every call through Gate
// before Base sends it. The permit is held until the response body has been
// read to the end or closed, the call fails, or the request's context ends,
// whichever comes first, and is released exactly once. A call the gate
// rejects is not sent, and RoundTrip returns the *gate.Rejection.
//
// Transport never retries. Set Gate before the first call and do not change
// the fields afterwards. A Transport is safe for concurrent use by multiple
// goroutines and must not be copied after first use.
type Transport struct {
	// Gate admits the calls. It must not be nil.
	Gate *gate.Gate
	// Base sends the admitted calls; nil means http.DefaultTransport.
	Base http.RoundTripper
	// OnThrottled, if not nil, is called with every 429 Too Many Requests
	// response from the downstream before RoundTrip returns it. It must not
	// read or close the body, and must not block.
	OnThrottled func(*http.Response)
	// Metrics, if not nil, counts the downstream's responses by status code.
	Metrics *Metrics

	throttled atomic.Uint64
}

// Throttled returns how many 429 Too Many Requests responses the downstream
// has sent through t.
func (t *Transport) Throttled() uint64 { return t.throttled.Load() }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Gate == nil {
		closeBody(req)
		return nil, errNoGate
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
	resp, err := base.RoundTrip(req)
	if err != nil || resp == nil {
		b.permit.Release()
		if err == nil {
			err = errors.New("httpmw: base RoundTripper returned no response and no error")
		}
		return nil, err
	}
	t.observe(resp)
	if resp.Body == nil || resp.Body == http.NoBody {
		// Nothing more will come from the downstream: the call has ended.
		b.permit.Release()
		return resp, nil
	}
	b.rc = resp.Body
	// If the caller neither reads nor closes the body, the call still ends
	// when its context does: the transport then abandons the connection.
	b.stop = context.AfterFunc(req.Context(), b.release)
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection is written to as well as read.
		resp.Body = &readWriteBody{body: b, w: rw}
	} else {
		resp.Body = b
	}
	return resp, nil
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
		t.Metrics.observe(t.Gate.Name(), resp.StatusCode)
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
