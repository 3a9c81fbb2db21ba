package traffic

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url + "/")
	if err != nil {
		t.Error(err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestDownstreamRejectsBeyondLimitAtOnce(t *testing.T) {
	const latency = time.Second
	d, err := StartDownstream(5, latency)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

	var ok, rejected atomic.Int64
	var wg sync.WaitGroup
	var slowestReject, fastestOK atomic.Int64
	fastestOK.Store(int64(time.Hour))
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			switch code := get(t, c, d.URL()); code {
			case http.StatusOK:
				ok.Add(1)
				lower(&fastestOK, int64(time.Since(t0)))
			case http.StatusTooManyRequests:
				rejected.Add(1)
				raise(&slowestReject, int64(time.Since(t0)))
			default:
				t.Errorf("status %d", code)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 5 || rejected.Load() != 7 {
		t.Errorf("ok %d, rejected %d; want 5 and 7", ok.Load(), rejected.Load())
	}
	// No queue: a 429 never waits for a slot to free.
	if slow, fast := time.Duration(slowestReject.Load()), time.Duration(fastestOK.Load()); slow >= fast || fast < latency {
		t.Errorf("slowest 429 took %v, fastest 200 %v; want 429s at once and 200s after the latency", slow, fast)
	}
	s := d.Sample()
	if s.OK != 5 || s.Rejected != 7 || s.InFlight != 0 {
		t.Errorf("Sample() = %+v", s)
	}
	if s.Peak < 6 || s.Peak > 12 {
		t.Errorf("Peak = %d; it counts the rejected calls at the moment they arrive, so 6..12", s.Peak)
	}
	if s.WindowPeak != s.Peak {
		t.Errorf("WindowPeak = %d, want the peak %d in the first window", s.WindowPeak, s.Peak)
	}
	if next := d.Sample(); next.WindowPeak != 0 || next.Peak != s.Peak {
		t.Errorf("after an idle window: %+v", next)
	}
}

// TestDownstreamStress checks what the report relies on under many
// concurrent callers: the downstream completes no more calls than its limit
// allows in the time, rejects the rest, and its counters agree.
func TestDownstreamStress(t *testing.T) {
	const limit = 10
	d, err := StartDownstream(limit, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}

	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				get(t, c, d.URL())
			}
		}()
	}
	var sampled int64
	for ctx.Err() == nil {
		sampled = max(sampled, d.Sample().WindowPeak)
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	s := d.Sample()
	if s.OK == 0 || s.Rejected == 0 {
		t.Fatalf("Sample() = %+v; want both successes and 429s", s)
	}
	// 700ms at 20ms per call and 10 slots: at most 10 × 36 successes.
	if s.OK > limit*36 {
		t.Errorf("%d successes: more than the limit allows", s.OK)
	}
	if s.InFlight != 0 {
		t.Errorf("InFlight = %d after the callers stopped", s.InFlight)
	}
	if sampled > s.Peak || s.Peak > 40 {
		t.Errorf("window peaks up to %d, peak %d: peaks must agree and stay within the callers", sampled, s.Peak)
	}
}

func TestDownstreamSlotOutlivesAnAbandonedCall(t *testing.T) {
	d, err := StartDownstream(1, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	impatient := &http.Client{Timeout: 50 * time.Millisecond}
	if _, err := impatient.Get(d.URL() + "/"); err == nil {
		t.Fatal("the impatient call did not time out")
	}
	// The caller has left, but the downstream is still working on it.
	if code := get(t, http.DefaultClient, d.URL()); code != http.StatusTooManyRequests {
		t.Errorf("second call: status %d, want 429 while the abandoned one holds the slot", code)
	}
	time.Sleep(450 * time.Millisecond)
	if s := d.Sample(); s.Abandoned != 1 || s.OK != 0 {
		t.Errorf("Sample() = %+v; want one abandoned call, no success", s)
	}
}

func TestDownstreamSetLatency(t *testing.T) {
	d, err := StartDownstream(10, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t0 := time.Now()
	get(t, http.DefaultClient, d.URL())
	fast := time.Since(t0)
	d.SetLatency(200 * time.Millisecond)
	t0 = time.Now()
	get(t, http.DefaultClient, d.URL())
	if slow := time.Since(t0); slow < 200*time.Millisecond || fast > 150*time.Millisecond {
		t.Errorf("calls took %v then %v; want ≈1ms then ≥200ms", fast, slow)
	}
}

// A call that asks for its own latency takes that long, and a malformed one
// is refused without holding a slot.
func TestDownstreamLatencyOfOneCall(t *testing.T) {
	d, err := StartDownstream(10, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t0 := time.Now()
	resp, err := http.Get(d.URL() + "/?" + LatencyParam + "=200ms")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if took := time.Since(t0); resp.StatusCode != http.StatusOK || took < 200*time.Millisecond {
		t.Errorf("a call asking for 200ms: %d after %v", resp.StatusCode, took)
	}
	for _, bad := range []string{"soon", "-1s"} {
		resp, err := http.Get(d.URL() + "/?" + LatencyParam + "=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("latency %q: %d, want 400", bad, resp.StatusCode)
		}
	}
	if c := d.Sample(); c.InFlight != 0 || c.OK != 1 || c.Rejected != 0 {
		t.Errorf("after the calls: %+v, want nothing in flight, 1 OK, 0 rejected", c)
	}
}

func TestDownstreamCloseEndsCallsInFlight(t *testing.T) {
	d, err := StartDownstream(10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(d.URL() + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	for d.Sample().InFlight == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	t0 := time.Now()
	if err := d.Close(); err != nil {
		t.Error(err)
	}
	<-done
	if time.Since(t0) > 3*time.Second {
		t.Errorf("Close took %v with a one-minute call in flight", time.Since(t0))
	}
}

func lower(v *atomic.Int64, n int64) {
	for {
		cur := v.Load()
		if n >= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}
