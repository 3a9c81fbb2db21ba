package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

// The metrics stay in the pod by default, and the probes have a port of
// their own that serves them and nothing else; the metrics port serves no
// probe.
func TestProbesAndMetricsArePortsOfTheirOwn(t *testing.T) {
	c, err := parseConfig([]string{"--route", "listen=127.0.0.1:9001,gate=a,upstream=http://a", "--plan-dir", "/p"},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !loopback(c.metricsListen) {
		t.Errorf("--metrics-listen defaults to %q, which other pods reach", c.metricsListen)
	}

	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(4).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	for _, c := range []struct {
		addr, path string
		want       int
	}{
		{p.probeAddr, "/healthz", 200}, {p.probeAddr, "/readyz", 200}, {p.probeAddr, "/metrics", 404},
		{p.metricsAddr, "/metrics", 200}, {p.metricsAddr, "/healthz", 404}, {p.metricsAddr, "/readyz", 404},
	} {
		if code, _, _ := get(t, "http://"+c.addr+c.path); code != c.want {
			t.Errorf("GET %s on %s: %d, want %d", c.path, c.addr, code, c.want)
		}
	}
	for _, s := range p.servers {
		if s.srv.ReadHeaderTimeout <= 0 || s.srv.IdleTimeout <= 0 {
			t.Errorf("server %s: ReadHeaderTimeout %v, IdleTimeout %v; want both bounded", s.name, s.srv.ReadHeaderTimeout, s.srv.IdleTimeout)
		}
	}
}

// A downstream cannot pass its answer off as the proxy's own rejection (or
// error): the proxy's headers are taken out of what it sends, trailers
// included, so the application sees the downstream's 503 for what it is.
func TestDownstreamCannotForgeTheProxysHeaders(t *testing.T) {
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(RejectedHeader, "true")
		w.Header().Set(ProxyErrorHeader, "upstream_unreachable")
		w.Header().Set("Trailer", RejectedHeader+", X-Kept")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "queue_full\n")
		w.Header().Set(RejectedHeader, "true")
		w.Header().Set("X-Kept", "yes")
	}))
	t.Cleanup(forger.Close)
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(4).Obj())
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+forger.URL)
	resp, err := http.Get("http://" + p.addr(testGate) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 503 || string(body) != "queue_full\n" {
		t.Errorf("got %d %q, want the downstream's 503 and body", resp.StatusCode, body)
	}
	for _, h := range []string{RejectedHeader, ProxyErrorHeader} {
		if v := resp.Header.Values(h); len(v) > 0 {
			t.Errorf("the downstream's %s: %q reached the application", h, v)
		}
		if v := resp.Trailer.Values(h); len(v) > 0 {
			t.Errorf("the downstream's trailer %s: %q reached the application", h, v)
		}
	}
	if resp.Trailer.Get("X-Kept") != "yes" {
		t.Errorf("trailers %v: the downstream's own were lost", resp.Trailer)
	}
	// Counted as the downstream's 503, not as a rejection of the gate.
	p.idle(t, testGate)
	if v, _ := p.metric(t, `backpressure_gate_rejected_total{gate="`+testGate+`",reason="queue_full"}`); v != "" && v != "0" {
		t.Errorf("the gate counted %s rejections", v)
	}
}

// A host mapped without a port admits http's port 80 only, not every port
// of the host: mapped as 127.0.0.1, a call to 127.0.0.1:<another port> is
// refused; mapped with its port, it is admitted.
func TestForwardHostWithoutPortAdmitsPort80Only(t *testing.T) {
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(4).Obj())
	u := startUpstream(t, 0)
	for _, c := range []struct {
		mapping string
		want    int
	}{
		{"127.0.0.1", http.StatusForbidden},
		{strings.TrimPrefix(u.URL, "http://"), http.StatusOK},
	} {
		p := startProxy(t, nil, "--plan-dir", dir, "--forward-listen", "127.0.0.1:0", "--forward-host", c.mapping+"="+testGate)
		fwd := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+p.addr("forward")))}}
		resp, err := fwd.Get(u.URL + "/echo")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("--forward-host %s, call to %s: %d, want %d", c.mapping, u.URL, resp.StatusCode, c.want)
		}
		if c.want == http.StatusForbidden && resp.Header.Get(ProxyErrorHeader) != "host_not_mapped" {
			t.Errorf("refused without saying why: %v", resp.Header)
		}
	}
	f := &forwarder{hosts: map[string]http.Handler{"api.internal": http.NotFoundHandler()}}
	for hostport, admitted := range map[string]bool{"api.internal": true, "api.internal:80": true, "API.internal:80": true,
		"api.internal:6379": false, "api.internal:8080": false, "other.internal:80": false} {
		if got := f.lookup(hostport) != nil; got != admitted {
			t.Errorf("lookup(%q) admitted %v, want %v", hostport, got, admitted)
		}
	}
}

// rawCall sends req on a new connection to addr and returns the
// connection and a reader of what comes back.
func rawCall(t *testing.T, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// A call holds its permit for --max-call-duration at most on the
// application's side: a client that stops reading the answer, one that
// never finishes sending its body, and an upgraded connection each give
// the permit back once it is up, while the client is still connected.
func TestACallCannotHoldItsPermitForever(t *testing.T) {
	const limit = 300 * time.Millisecond
	// The bound the test allows: the limit, and the moment the handler
	// takes to return and the permit to come back on a loaded machine.
	const bound = 10 * time.Second
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
	u := startUpstream(t, 64<<20)
	upgrades := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		_, _ = io.Copy(conn, rw) // echo until the proxy closes
	}))
	t.Cleanup(upgrades.Close)
	plantest.Write(t, dir, plantest.MakeDocument("ws").Permits(1).Obj())
	p := startProxy(t, nil, "--plan-dir", dir, "--max-call-duration", limit.String(),
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL,
		"--route", "listen=127.0.0.1:0,gate=ws,upstream="+upgrades.URL)
	inFlight := func(gate string) string {
		v, _ := p.metric(t, `backpressure_gate_in_flight{gate="`+gate+`"}`)
		return v
	}
	held := func(what, gate string, start func() net.Conn) {
		t.Helper()
		conn := start()
		eventually(t, bound, what+": the call admitted", func() bool { return inFlight(gate) == "1" })
		begin := time.Now()
		eventually(t, bound, what+": the permit back", func() bool { return inFlight(gate) == "0" })
		t.Logf("%s: the permit came back %v after the call was seen in flight (limit %v)", what, time.Since(begin).Round(time.Millisecond), limit)
		_ = conn.Close()
	}

	t.Run("a client that does not read the answer", func(t *testing.T) {
		held("unread answer", testGate, func() net.Conn {
			conn, _ := rawCall(t, p.addr(testGate), "GET /download HTTP/1.1\r\nHost: x\r\n\r\n")
			return conn // 64 MiB to send, and nobody reading
		})
	})
	t.Run("a client that does not finish its body", func(t *testing.T) {
		held("unfinished body", testGate, func() net.Conn {
			conn, _ := rawCall(t, p.addr(testGate), "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nonly this")
			return conn
		})
	})
	t.Run("an upgraded connection", func(t *testing.T) {
		held("upgraded connection", "ws", func() net.Conn {
			conn, r := rawCall(t, p.addr("ws"), "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			status, err := r.ReadString('\n')
			if err != nil || !strings.Contains(status, "101") {
				t.Fatalf("upgrade through the route: %q, %v", status, err)
			}
			return conn
		})
	})
}

// An h2c upgrade would carry any number of calls on one permit: the proxy
// leaves the Upgrade out, and the call goes on as HTTP/1.1. The forwarding
// port declines any other upgrade.
func TestUpgradesAreNotTunnelsPastTheGate(t *testing.T) {
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(4).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir,
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL,
		"--forward-listen", "127.0.0.1:0", "--forward-host", strings.TrimPrefix(u.URL, "http://")+"="+testGate)

	for name, target := range map[string]string{"route": p.addr(testGate), "forwarding port": p.addr("forward")} {
		t.Run("h2c through the "+name, func(t *testing.T) {
			uri := "/echo"
			if name == "forwarding port" {
				uri = u.URL + "/echo"
			}
			_, r := rawCall(t, target, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", uri))
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || strings.Contains(string(body), "h2c") || strings.Contains(string(body), "Http2-Settings") {
				t.Errorf("%d, the downstream saw %s; want 200 and no upgrade", resp.StatusCode, body)
			}
		})
	}
	t.Run("a WebSocket through the forwarding port", func(t *testing.T) {
		_, r := rawCall(t, p.addr("forward"), "GET "+u.URL+"/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented || resp.Header.Get(ProxyErrorHeader) != "upgrade_declined" {
			t.Errorf("%d %v, want 501 upgrade_declined", resp.StatusCode, resp.Header)
		}
	})
}
