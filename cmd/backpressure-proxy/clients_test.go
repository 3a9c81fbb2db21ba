package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backpressure-dev/backpressure-operator/api/plan/plantest"
)

// The proxy is tested with clients nobody here wrote: curl and Python's
// urllib, run as processes against the proxy serving in the test process
// (so that -race sees the proxy), in front of a real server on 127.0.0.1.

// bigSize is the size of the bodies sent up and down: large enough that
// nothing can hold a whole body in a buffer by accident.
const bigSize = 64 << 20

// need returns the path of a client program, or skips the test.
func need(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed on this machine: the test of the proxy with %s cannot run", name, name)
	}
	return path
}

// clientEnv is the environment of the client processes, without the
// proxy variables that would send them elsewhere.
func clientEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// answer is what a client received.
type answer struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"` // lower-case names
	Sha256  string            `json:"sha256"`
	Length  int64             `json:"length"`
	Body    string            `json:"body"`
}

// curl runs curl with args and returns the last response it received (the
// one after any 100 Continue), its body digested.
func curl(t *testing.T, args ...string) answer {
	t.Helper()
	path := need(t, "curl")
	dir := t.TempDir()
	headers, body := filepath.Join(dir, "headers"), filepath.Join(dir, "body")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"-sS", "--max-time", "60", "-D", headers, "-o", body}, args...)...)
	cmd.Env = clientEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("curl %q: %v\n%s", args, err, out)
	}
	return readAnswer(t, headers, body)
}

func readAnswer(t *testing.T, headerFile, bodyFile string) answer {
	t.Helper()
	raw, err := os.ReadFile(headerFile)
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(raw), "\r\n", "\n")), "\n\n")
	last := blocks[len(blocks)-1]
	statusLine, rest, _ := strings.Cut(last, "\n")
	fields := strings.Fields(statusLine)
	if len(fields) < 2 {
		t.Fatalf("curl's status line %q", statusLine)
	}
	a := answer{Headers: map[string]string{}}
	if a.Status, err = strconv.Atoi(fields[1]); err != nil {
		t.Fatalf("curl's status line %q", statusLine)
	}
	mh, err := textproto.NewReader(bufio.NewReader(strings.NewReader(rest + "\n\n"))).ReadMIMEHeader()
	if err != nil {
		t.Fatalf("curl's headers %q: %v", rest, err)
	}
	for k, v := range mh {
		a.Headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	f, err := os.Open(bodyFile)
	if errors.Is(err, os.ErrNotExist) {
		return a // no body
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	a.Sha256, a.Length = digest(t, f)
	if a.Length <= 4096 {
		b, _ := os.ReadFile(bodyFile)
		a.Body = string(b)
	}
	return a
}

func digest(t *testing.T, r io.Reader) (string, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// python runs testdata/client.py with args and returns its answer.
func python(t *testing.T, args ...string) answer {
	t.Helper()
	path := need(t, "python3")
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"testdata/client.py"}, args...)...)
	cmd.Env = clientEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 client.py %q: %v\n%s", args, err, stderr.String())
	}
	var a answer
	if err := json.Unmarshal(out, &a); err != nil {
		t.Fatalf("python3 client.py %q printed %q: %v", args, out, err)
	}
	return a
}

// bigFile writes the upload body, /download's bigSize pseudo-random bytes,
// and returns its path and SHA-256.
func bigFile(t *testing.T, u *upstream) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, u.big, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, u.bigSum
}

// streamLines starts cmd, whose stdout carries /stream's lines as they
// arrive, and checks that chunk-1 arrives before the upstream is let to
// send chunk-2: a proxy that buffered the stream would fail here.
func streamLines(t *testing.T, u *upstream, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		if l != "chunk-1" {
			t.Fatalf("first line %q, want chunk-1", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("chunk-1 did not reach the client before the stream went on: the proxy buffers (stderr %q)", stderr.String())
	}
	u.next <- struct{}{}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.String())
	}
	if strings.Join(rest, "|") != "chunk-2" {
		t.Errorf("after chunk-1 the client read %q, want chunk-2", rest)
	}
}

// hold makes n calls to /hold through url from Go, and returns once the
// upstream holds all of them; the calls end when u.releaseAll is called.
// Their statuses arrive on the returned channel.
func hold(t *testing.T, u *upstream, url string, n int) <-chan int {
	t.Helper()
	before := u.holding.Load()
	codes := make(chan int, n)
	for range n {
		go func() {
			resp, err := http.Get(url + "/hold")
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	eventually(t, 10*time.Second, "the upstream holding the calls", func() bool { return u.holding.Load() == before+int64(n) })
	return codes
}

// checkLocalRejection checks a's status and the headers of a local
// rejection.
func checkLocalRejection(t *testing.T, client string, a answer, status int, reason string) {
	t.Helper()
	if a.Status != status || a.Headers["retry-after"] != "1" || a.Headers[strings.ToLower(RejectedHeader)] != "true" ||
		strings.TrimSpace(a.Body) != reason {
		t.Errorf("%s: local rejection = %d, Retry-After %q, %s %q, body %q; want %d, 1, true, %q",
			client, a.Status, a.Headers["retry-after"], RejectedHeader, a.Headers[strings.ToLower(RejectedHeader)], a.Body, status, reason)
	}
}

// startForClients starts an upstream with a large body and a proxy with
// room for every call: a route to the upstream's URL with path appended, and
// a forwarding port admitting the upstream's host and port. It returns the
// upstream and the route's and the forwarding port's URLs.
func startForClients(t *testing.T, path string) (u *upstream, route, fwd string) {
	t.Helper()
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(64).Obj())
	u = startUpstream(t, bigSize)
	p := startProxy(t, nil, "--plan-dir", dir,
		"--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL+path,
		"--forward-listen", "127.0.0.1:0", "--forward-host", strings.TrimPrefix(u.URL, "http://")+"="+testGate)
	t.Cleanup(func() {
		if v, ok := p.metric(t, `backpressure_gate_admitted_total{gate="`+testGate+`"}`); !ok || v == "0" {
			t.Errorf("backpressure_gate_admitted_total = %q, %v after the calls", v, ok)
		}
	})
	return u, "http://" + p.addr(testGate), "http://" + p.addr("forward")
}

func TestCurlThroughTheProxy(t *testing.T) {
	need(t, "curl")
	u, route, fwd := startForClients(t, "/base")
	// The route's upstream has a path (the upstream serves its handlers
	// under /base/ too): the proxy joins it with the call's.

	t.Run("rewrites the target and keeps the request", func(t *testing.T) {
		a := curl(t, "-H", "X-App: 1", route+"/echo?q=a%2Fb")
		var echo struct {
			Method, URI, Host string
			Header            http.Header
		}
		if err := json.Unmarshal([]byte(a.Body), &echo); err != nil {
			t.Fatalf("%d %q: %v", a.Status, a.Body, err)
		}
		if echo.URI != "/base/echo?q=a%2Fb" || echo.Host != strings.TrimPrefix(u.URL, "http://") || echo.Header.Get("X-App") != "1" {
			t.Errorf("the downstream saw %+v", echo)
		}
		if v := echo.Header.Get("X-Forwarded-For"); v != "" {
			t.Errorf("X-Forwarded-For %q added", v)
		}
	})
	t.Run("streams as the downstream flushes", func(t *testing.T) {
		cmd := exec.Command(need(t, "curl"), "-sS", "-N", "--max-time", "60", route+"/stream")
		cmd.Env = clientEnv()
		streamLines(t, u, cmd)
	})
	t.Run("uploads 64 MiB", func(t *testing.T) {
		path, sum := bigFile(t, u)
		a := curl(t, "--data-binary", "@"+path, "-H", "Content-Type: application/octet-stream", route+"/upload")
		if a.Status != 200 || a.Body != sum || a.Headers["x-body-length"] != strconv.Itoa(bigSize) {
			t.Errorf("upload: %d, downstream's digest %q of %s bytes; want 200, %s of %d", a.Status, a.Body, a.Headers["x-body-length"], sum, bigSize)
		}
	})
	t.Run("downloads 64 MiB", func(t *testing.T) {
		a := curl(t, route+"/download")
		if a.Status != 200 || a.Sha256 != u.bigSum || a.Length != bigSize || a.Headers["x-body-sha256"] != u.bigSum {
			t.Errorf("download: %d, %d bytes, digest %s; want 200, %d bytes, %s", a.Status, a.Length, a.Sha256, bigSize, u.bigSum)
		}
	})
	t.Run("passes the downstream's 429 through", func(t *testing.T) {
		a := curl(t, route+"/throttle")
		if a.Status != 429 || a.Headers["retry-after"] != "7" || a.Headers["x-downstream"] != "logistics" ||
			a.Body != "downstream says slow down\n" || a.Headers[strings.ToLower(RejectedHeader)] != "" {
			t.Errorf("downstream's 429 arrived as %d %v %q", a.Status, a.Headers, a.Body)
		}
	})
	t.Run("forwards absolute-form requests", func(t *testing.T) {
		a := curl(t, "-x", fwd, u.URL+"/base/echo")
		if a.Status != 200 || !strings.Contains(a.Body, `"uri":"/base/echo"`) {
			t.Errorf("forwarded: %d %q", a.Status, a.Body)
		}
		a = curl(t, "-x", fwd, "--data-binary", "@"+mustBig(t, u), u.URL+"/base/upload")
		if a.Status != 200 || a.Body != u.bigSum {
			t.Errorf("forwarded upload: %d %q, want %s", a.Status, a.Body, u.bigSum)
		}
	})
	t.Run("refuses a host without a gate", func(t *testing.T) {
		port := u.URL[strings.LastIndex(u.URL, ":")+1:]
		a := curl(t, "-x", fwd, "http://localhost:"+port+"/base/echo")
		if a.Status != 403 || a.Headers[strings.ToLower(ProxyErrorHeader)] != "host_not_mapped" {
			t.Errorf("unmapped host: %d %v", a.Status, a.Headers)
		}
	})
	t.Run("declines CONNECT", func(t *testing.T) {
		cmd := exec.Command(need(t, "curl"), "-sS", "--max-time", "20", "-x", fwd, "https://127.0.0.1:1/")
		cmd.Env = clientEnv()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "405") {
			t.Errorf("curl through a CONNECT: %v %s; want a failure naming 405", err, out)
		}
	})
}

// mustBig is bigFile's path alone.
func mustBig(t *testing.T, u *upstream) string {
	path, _ := bigFile(t, u)
	return path
}

func TestPythonThroughTheProxy(t *testing.T) {
	need(t, "python3")
	u, route, fwd := startForClients(t, "")

	t.Run("streams as the downstream flushes", func(t *testing.T) {
		cmd := exec.Command(need(t, "python3"), "testdata/client.py", "stream", route+"/stream")
		cmd.Env = clientEnv()
		streamLines(t, u, cmd)
	})
	t.Run("uploads 64 MiB", func(t *testing.T) {
		path, sum := bigFile(t, u)
		a := python(t, "post", route+"/upload", path)
		if a.Status != 200 || a.Body != sum {
			t.Errorf("upload: %d %q, want 200 %s", a.Status, a.Body, sum)
		}
	})
	t.Run("downloads 64 MiB", func(t *testing.T) {
		a := python(t, "get", route+"/download")
		if a.Status != 200 || a.Sha256 != u.bigSum || a.Length != bigSize {
			t.Errorf("download: %d, %d bytes, %s; want 200, %d, %s", a.Status, a.Length, a.Sha256, bigSize, u.bigSum)
		}
	})
	t.Run("passes the downstream's 429 through", func(t *testing.T) {
		a := python(t, "get", route+"/throttle")
		if a.Status != 429 || a.Headers["retry-after"] != "7" || a.Body != "downstream says slow down\n" || a.Headers[strings.ToLower(RejectedHeader)] != "" {
			t.Errorf("downstream's 429 arrived as %d %v %q", a.Status, a.Headers, a.Body)
		}
	})
	t.Run("forwards through urllib's ProxyHandler", func(t *testing.T) {
		a := python(t, "get", u.URL+"/download", fwd)
		if a.Status != 200 || a.Sha256 != u.bigSum {
			t.Errorf("forwarded download: %d %s", a.Status, a.Sha256)
		}
	})
}

// A pod's share with one permit and no waiting room: the second call is
// answered by the proxy at once, and never reaches the downstream.
func TestLocalRejectionWhenTheGateIsFull(t *testing.T) {
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	route := "http://" + p.addr(testGate)
	codes := hold(t, u, route, 1)
	calls := u.calls.Load()

	for _, c := range []struct {
		client string
		call   func() answer
	}{
		{"curl", func() answer { return curl(t, route+"/echo") }},
		{"python3", func() answer { return python(t, "get", route+"/echo") }},
	} {
		t.Run(c.client, func(t *testing.T) {
			need(t, c.client)
			began := time.Now()
			a := c.call()
			checkLocalRejection(t, c.client, a, http.StatusServiceUnavailable, "queue_full")
			t.Logf("%s: rejected in %v, process start included", c.client, time.Since(began))
		})
	}
	if got := u.calls.Load(); got != calls {
		t.Errorf("the downstream received %d calls the gate rejected", got-calls)
	}
	if v, _ := p.metric(t, `backpressure_gate_rejected_total{gate="`+testGate+`",reason="queue_full"}`); v == "" || v == "0" {
		t.Errorf("backpressure_gate_rejected_total{reason=queue_full} = %q", v)
	}
	u.releaseAll()
	if code := <-codes; code != 200 {
		t.Errorf("the held call ended with %d", code)
	}
}

func TestLocalRejectionWhenRateLimitedIs429(t *testing.T) {
	need(t, "curl")
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(8).Rate(0.5, 1).Obj()) // one call per 2s, burst 1
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	route := "http://" + p.addr(testGate)
	if a := curl(t, route+"/echo"); a.Status != 200 {
		t.Fatalf("first call: %d", a.Status)
	}
	a := curl(t, route+"/echo")
	if a.Status != http.StatusTooManyRequests || a.Headers[strings.ToLower(RejectedHeader)] != "true" || strings.TrimSpace(a.Body) != "rate_limited" {
		t.Errorf("second call: %d %v %q; want the proxy's 429", a.Status, a.Headers, a.Body)
	}
	if ra, err := strconv.Atoi(a.Headers["retry-after"]); err != nil || ra < 1 || ra > 2 {
		t.Errorf("Retry-After %q, want 1 or 2 (the next token)", a.Headers["retry-after"])
	}
}

// A new plan in the mounted directory changes the limit while the proxy
// runs: one permit, then two.
func TestPlanReloadChangesTheLimit(t *testing.T) {
	need(t, "curl")
	dir := t.TempDir()
	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(1).Obj())
	u := startUpstream(t, 0)
	p := startProxy(t, nil, "--plan-dir", dir, "--route", "listen=127.0.0.1:0,gate="+testGate+",upstream="+u.URL)
	route := "http://" + p.addr(testGate)
	permits := `backpressure_gate_permits{gate="` + testGate + `"}`
	if v, _ := p.metric(t, permits); v != "1" {
		t.Fatalf("%s = %q, want 1", permits, v)
	}
	first := hold(t, u, route, 1)
	checkLocalRejection(t, "curl", curl(t, route+"/echo"), 503, "queue_full")

	plantest.Write(t, dir, plantest.MakeDocument(testGate).Permits(2).Obj())
	eventually(t, 15*time.Second, "the proxy applying the new plan", func() bool {
		v, _ := p.metric(t, permits)
		return v == "2"
	})
	second := hold(t, u, route, 1) // admitted now: two calls in flight
	checkLocalRejection(t, "curl", curl(t, route+"/echo"), 503, "queue_full")
	if v, _ := p.metric(t, `backpressure_config_plan_info{gate="`+testGate+`",hash="`+plantest.MakeDocument(testGate).Permits(2).Obj().Hash+`"}`); v != "1" {
		t.Errorf("backpressure_config_plan_info for the new hash = %q", v)
	}
	u.releaseAll()
	for _, c := range []<-chan int{first, second} {
		if code := <-c; code != 200 {
			t.Errorf("a held call ended with %d", code)
		}
	}
}
