package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/backpressure-dev/backpressure-operator/api/plan"
	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
	"github.com/backpressure-dev/backpressure-operator/pkg/backpressure"
)

func TestTrailersPassThrough(t *testing.T) {
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(4).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	u.next <- struct{}{} // no need to wait between the chunks here
	code, body, trailer := get(t, "http://"+p.addr(testGate)+"/stream")
	if code != 200 || body != "chunk-1\nchunk-2\n" || trailer.Get("X-Stream-Trailer") != "done" {
		t.Errorf("stream: %d %q, trailer %v; want 200, both chunks, X-Stream-Trailer: done", code, body, trailer)
	}
}

// Every route and every forwarded host enforces its own gate: a full gate
// rejects its calls and no other's.
func TestEachDownstreamHasItsOwnGate(t *testing.T) {
	const other = "payments-api"
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
	plantest.Write(t, dir, plantest.MakeDocument(other).Permits(1).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir,
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL,
		"--route", "listen=127.0.0.1:0,gate="+other+",upstream="+u.URL,
		"--forward-listen", "127.0.0.1:0", "--forward-host", strings.TrimPrefix(u.URL, "http://")+"="+other)
	codes := hold(t, u, "http://"+p.addr(testGate), 1)
	if code, body, _ := get(t, "http://"+p.addr(testGate)+"/echo"); code != 503 || strings.TrimSpace(body) != "queue_full" {
		t.Errorf("full gate %s: %d %q, want 503 queue_full", testGate, code, body)
	}
	if code, _, _ := get(t, "http://"+p.addr(other)+"/echo"); code != 200 {
		t.Errorf("gate %s, which is free: %d", other, code)
	}
	// The forwarding port shares the gate of other with its route.
	fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+p.addr("forward")))}}
	p.idle(t, other)
	held := hold(t, u, "http://"+p.addr(other), 1)
	resp, err := fwd.Get(u.URL + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get(RejectedHeader) != "true" {
		t.Errorf("forwarded call on the full gate %s: %d %v", other, resp.StatusCode, resp.Header)
	}
	u.releaseAll()
	<-codes
	<-held
}

// ackOptions acknowledge on a pod in a fake API server; the function
// returns the pod's acknowledgement of the test gate.
func ackOptions(t *testing.T) (*backpressure.AckOptions, func() string) {
	t.Helper()
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gateway-0", Namespace: "shop"}})
	// The downward API's variables, as the proxy reads them in a pod.
	t.Setenv(backpressure.EnvPodName, "gateway-0")
	t.Setenv(backpressure.EnvPodNamespace, "shop")
	ack := &backpressure.AckOptions{
		Client:  client,
		Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: 100 * time.Millisecond},
	}
	annotation := func() string {
		pod, err := client.CoreV1().Pods("shop").Get(context.Background(), "gateway-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod.Annotations[plan.AppliedAnnotationPrefix+testGate]
	}
	return ack, annotation
}

// The proxy acknowledges like the library: a larger share at once, a
// smaller one once the calls in flight fit in it.
func TestAcknowledgesLikeTheLibrary(t *testing.T) {
	dir := t.TempDir()
	two, one := plantest.MakeDocument(testGate).Revision(1).Permits(2).Obj(), plantest.MakeDocument(testGate).Revision(2).Permits(1).Obj()
	plantest.Write(t, dir, two)
	u := startUpstream(t, 0)
	ack, annotation := ackOptions(t)
	p := startProxy(t, ack, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	route := "http://" + p.addr(testGate)
	eventually(t, 10*time.Second, "the first plan acknowledged", func() bool { return annotation() == plan.AckFor(two).String() })

	// Two calls in flight, and a share of one: not acknowledged until one
	// of them ends.
	codes := hold(t, u, route, 2)
	plantest.Write(t, dir, one)
	eventually(t, 10*time.Second, "the smaller plan applied", func() bool {
		v, _ := p.metric(t, `backpressure_gate_permits{gate="`+testGate+`"}`)
		return v == "1"
	})
	time.Sleep(300 * time.Millisecond)
	if got := annotation(); got != plan.AckFor(two).String() {
		t.Fatalf("with 2 calls in flight the pod acknowledged %q, a share of 1", got)
	}
	u.releaseAll()
	<-codes
	<-codes
	eventually(t, 10*time.Second, "the smaller plan acknowledged", func() bool { return annotation() == plan.AckFor(one).String() })
}

// On SIGTERM the proxy stops taking calls, lets the call in flight finish,
// and only then releases the pod's share, like the library's Start.
func TestShutdownDrainsThenReleases(t *testing.T) {
	dir := t.TempDir()
	one := plantest.MakeDocument(testGate).Permits(1).Obj()
	plantest.Write(t, dir, one)
	ack, annotation := ackOptions(t)
	u2 := startUpstream(t, 0)
	p2 := startProxy(t, ack, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u2.URL)
	route2 := "http://" + p2.addr(testGate)
	eventually(t, 10*time.Second, "the plan acknowledged", func() bool { return annotation() == plan.AckFor(one).String() })
	held := hold(t, u2, route2, 1)
	stopped := make(chan error, 1)
	go func() { stopped <- p2.stop(t) }()
	eventually(t, 5*time.Second, "/readyz turning 503", func() bool {
		resp, err := http.Get("http://" + p2.probeAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == 503
	})
	eventually(t, 5*time.Second, "the route refusing connections", func() bool {
		c, err := net.DialTimeout("tcp", p2.addr(testGate), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("the proxy stopped (%v) with a call in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	if got := annotation(); strings.HasSuffix(got, "/released") {
		t.Fatalf("released (%q) with a call in flight", got)
	}
	u2.releaseAll()
	if code := <-held; code != 200 {
		t.Errorf("the call in flight at shutdown ended with %d, want 200", code)
	}
	if err := <-stopped; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if got := annotation(); got != one.Epoch+"/released" {
		t.Errorf("after shutdown the pod carries %q, want %s/released", got, one.Epoch)
	}
	if logs, err := os.ReadFile(p2.logPath); err != nil || !strings.Contains(string(logs), `"msg":"Stopped"`) {
		t.Errorf("no Stopped line in the log (%v):\n%s", err, logs)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A client that gives up does not free its permit while the downstream,
// which cannot tell, still works on the call; the permit comes back when
// the downstream answers, or, at the latest, the plan's deadline after the
// client left.
func TestAbandonedCallKeepsItsPermitUntilTheDownstreamAnswers(t *testing.T) {
	inFlight := `backpressure_gate_in_flight{gate="` + testGate + `"}`
	abandon := func(t *testing.T, url string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/hold", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			t.Fatalf("the held call answered %d before the client gave up", resp.StatusCode)
		}
	}

	t.Run("until the downstream answers", func(t *testing.T) {
		dir := t.TempDir()
		plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
		u := startUpstream(t, 0)
		p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
		route := "http://" + p.addr(testGate)
		abandon(t, route)
		time.Sleep(300 * time.Millisecond) // well past the client's leaving
		if u.holding.Load() != 1 {
			t.Fatalf("the downstream holds %d calls, want the abandoned one", u.holding.Load())
		}
		if v, _ := p.metric(t, inFlight); v != "1" {
			t.Errorf("%s = %q while the downstream still holds the abandoned call, want 1", inFlight, v)
		}
		if code, body, _ := get(t, route+"/echo"); code != 503 || strings.TrimSpace(body) != "queue_full" {
			t.Errorf("a call while the abandoned one holds the only permit: %d %q, want 503 queue_full", code, body)
		}
		u.releaseAll()
		eventually(t, 5*time.Second, "the permit coming back once the downstream answered", func() bool {
			v, _ := p.metric(t, inFlight)
			return v == "0"
		})
	})
	t.Run("for at most the plan's deadline", func(t *testing.T) {
		dir := t.TempDir()
		d := plantest.MakeDocument(testGate).Permits(1).Obj()
		d.DeadlineSeconds = 0.5
		d.Hash = plan.Hash(d)
		plantest.Write(t, dir, d)
		u := startUpstream(t, 0) // never answers /hold on its own
		p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
		abandon(t, "http://"+p.addr(testGate))
		left := time.Now()
		if v, _ := p.metric(t, inFlight); v != "1" {
			t.Errorf("%s = %q just after the client left, want 1", inFlight, v)
		}
		eventually(t, 5*time.Second, "the abandoned call cancelled after the plan's deadline", func() bool {
			v, _ := p.metric(t, inFlight)
			return v == "0" && u.holding.Load() == 0
		})
		if took := time.Since(left); took < 400*time.Millisecond {
			t.Errorf("the permit came back %v after the client left, before the plan's 500ms deadline", took)
		}
	})
}

// The downstream's answers are counted by gate and code, through a route and
// through the forwarding port alike; the proxy's own answers (a local
// rejection, a 502 for a downstream that cannot be reached) are not.
func TestDownstreamResponsesAreCounted(t *testing.T) {
	const unreachable = "payments-api"
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
	plantest.Write(t, dir, plantest.MakeDocument(unreachable).Permits(1).Obj())
	u := startUpstream(t, 0)
	closed := startUpstream(t, 0)
	closed.Close()
	p := startProxy(t, nil, "--plan-dir", dir,
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL,
		"--route", "listen=127.0.0.1:0,gate="+unreachable+",upstream="+closed.URL,
		"--forward-listen", "127.0.0.1:0", "--forward-host", strings.TrimPrefix(u.URL, "http://")+"="+testGate)
	route := "http://" + p.addr(testGate)
	// The gate has one permit: each call waits for it to come back, so
	// that no call here is the gate's own rejection.
	for path, want := range map[string]int{"/echo": 200, "/throttle": 429} {
		p.idle(t, testGate)
		if code, _, _ := get(t, route+path); code != want {
			t.Fatalf("%s: %d, want %d", path, code, want)
		}
	}
	p.idle(t, testGate)
	fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+p.addr("forward")))}}
	resp, err := fwd.Get(u.URL + "/throttle")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("forwarded /throttle: %d, want 429", resp.StatusCode)
	}
	if code, _, _ := get(t, "http://"+p.addr(unreachable)+"/echo"); code != http.StatusBadGateway {
		t.Errorf("unreachable downstream: %d, want 502", code)
	}
	p.idle(t, testGate)
	held := hold(t, u, route, 1)
	if code, _, _ := get(t, route+"/echo"); code != http.StatusServiceUnavailable {
		t.Errorf("full gate: %d, want 503", code)
	}
	u.releaseAll()
	<-held

	series := func(gate, code string) string {
		return `backpressure_downstream_http_responses_total{code="` + code + `",gate="` + gate + `"}`
	}
	for _, c := range []struct{ series, want string }{
		{series(testGate, "200"), "2"}, // /echo and the released /hold
		{series(testGate, "429"), "2"}, // one through the route, one forwarded
		{series(testGate, "503"), ""},  // the gate's own rejection
		{series(unreachable, "502"), ""},
	} {
		if v, _ := p.metric(t, c.series); v != c.want {
			t.Errorf("%s = %q, want %q", c.series, v, c.want)
		}
	}
}
