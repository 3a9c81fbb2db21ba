package traffic

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Downstream is the third-party API of the story: it accepts at most Limit
// calls in flight, globally, answers 429 at once to any call beyond that (it
// has no queue), and otherwise answers 200 after its current latency, or
// after the latency the call asks for (LatencyParam), so that a scenario
// can give every call a latency of its own.
//
// A call holds its slot for the whole latency even when the caller gives up
// early, as a real server's work goes on after its client has left: a
// caller's timeout frees the caller, not the downstream.
type Downstream struct {
	limit int64
	url   string
	srv   *http.Server

	// stop ends the latency sleeps of calls still in flight when the
	// downstream is closed.
	stop   context.Context
	cancel context.CancelFunc

	latency   atomic.Int64 // nanoseconds
	inFlight  atomic.Int64
	peak      atomic.Int64 // highest inFlight ever, rejected calls included
	window    atomic.Int64 // highest inFlight since the last Sample
	ok        atomic.Int64
	rejected  atomic.Int64
	abandoned atomic.Int64
}

// DownstreamCounts is a point-in-time reading of a Downstream.
type DownstreamCounts struct {
	// InFlight is the number of calls being served now.
	InFlight int64
	// WindowPeak is the highest in-flight count since the previous Sample,
	// calls that were rejected at once included.
	WindowPeak int64
	// Peak is the highest in-flight count since the downstream started.
	Peak int64
	// OK counts calls answered 200.
	OK int64
	// Rejected counts calls answered 429.
	Rejected int64
	// Abandoned counts calls whose caller left before the answer.
	Abandoned int64
}

// StartDownstream serves a downstream with the given global limit and
// initial latency on 127.0.0.1 at a free port.
func StartDownstream(limit int, latency time.Duration) (*Downstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &Downstream{limit: int64(limit), url: "http://" + ln.Addr().String()}
	d.stop, d.cancel = context.WithCancel(context.Background())
	d.latency.Store(int64(latency))
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

// LatencyParam is the query parameter that sets one call's latency, a
// time.Duration string (?latency=187ms): the downstream then takes that
// long, whatever its current latency.
const LatencyParam = "latency"

// URL returns the downstream's base URL.
func (d *Downstream) URL() string { return d.url }

// SetLatency changes the latency of calls that arrive from now on.
func (d *Downstream) SetLatency(latency time.Duration) { d.latency.Store(int64(latency)) }

// ServeHTTP serves one call.
func (d *Downstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := d.inFlight.Add(1)
	raise(&d.peak, n)
	raise(&d.window, n)
	if n > d.limit {
		d.inFlight.Add(-1)
		d.rejected.Add(1)
		http.Error(w, "too many requests in flight", http.StatusTooManyRequests)
		return
	}
	latency := time.Duration(d.latency.Load())
	if v := r.URL.Query().Get(LatencyParam); v != "" {
		l, err := time.ParseDuration(v)
		if err != nil || l < 0 {
			d.inFlight.Add(-1)
			http.Error(w, "latency: want a duration of at least 0, got "+v, http.StatusBadRequest)
			return
		}
		latency = l
	}
	t := time.NewTimer(latency)
	select {
	case <-t.C:
	case <-d.stop.Done():
		t.Stop()
	}
	d.inFlight.Add(-1)
	if r.Context().Err() != nil {
		// The caller left before the answer: no goodput, though the slot
		// was held all the same.
		d.abandoned.Add(1)
		return
	}
	d.ok.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"eta":"2d"}` + "\n"))
}

// Sample reads the counters and starts a new window for WindowPeak.
func (d *Downstream) Sample() DownstreamCounts {
	cur := d.inFlight.Load()
	return DownstreamCounts{
		InFlight:   cur,
		WindowPeak: max(d.window.Swap(cur), cur),
		Peak:       d.peak.Load(),
		OK:         d.ok.Load(),
		Rejected:   d.rejected.Load(),
		Abandoned:  d.abandoned.Load(),
	}
}

// Close stops the server, ending calls still in flight.
func (d *Downstream) Close() error {
	d.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return d.srv.Close()
	}
	return err
}

// raise sets v to n when n is higher.
func raise(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}
